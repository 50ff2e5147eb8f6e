/* doctor.h — `tfbench doctor`: will this machine, launcher, driver and library stack run tfbench correctly? */
#ifndef TFB_DOCTOR_H
#define TFB_DOCTOR_H
int tfb_doctor_main(int argc, char **argv);
#endif
