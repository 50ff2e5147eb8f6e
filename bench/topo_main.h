/* topo_main.h — the `tfbench topo` subcommand (see topo_main.c). Returns the process exit status. */
#ifndef TFB_TOPO_MAIN_H
#define TFB_TOPO_MAIN_H

int tfb_topo_main(int argc, char **argv);

#endif
