/* schedule.c — see schedule.h. */
#include "schedule.h"

typedef struct {
    tfb_op *ops;
    int n, first, last;
} op_list;

static void add(op_list *l, tfb_op_kind kind, int mb, int mb2) {
    int to_prev = kind == TFB_OP_RECV_ACT || kind == TFB_OP_SEND_GRAD || kind == TFB_OP_SEND_GRAD_RECV_ACT;
    int to_next = kind == TFB_OP_SEND_ACT || kind == TFB_OP_RECV_GRAD || kind == TFB_OP_SEND_ACT_RECV_GRAD;
    if ((to_prev && l->first) || (to_next && l->last)) return;
    l->ops[l->n++] = (tfb_op){.kind = kind, .mb = mb, .mb2 = mb2};
}

static void forward(op_list *l, int mb, int recv) {
    if (recv) add(l, TFB_OP_RECV_ACT, mb, -1);
    add(l, TFB_OP_FWD, mb, -1);
}

static void gpipe(op_list *l, int M) {
    for (int j = 0; j < M; j++) {
        forward(l, j, 1);
        add(l, TFB_OP_SEND_ACT, j, -1);
    }
    for (int j = 0; j < M; j++) {
        add(l, TFB_OP_RECV_GRAD, j, -1);
        add(l, TFB_OP_BWD, j, -1);
        add(l, TFB_OP_SEND_GRAD, j, -1);
    }
}

static void one_f_one_b(op_list *l, int P, int stage, int M) {
    int warm = P - stage - 1 < M ? P - stage - 1 : M, rest = M - warm;
    for (int j = 0; j < warm; j++) {
        forward(l, j, 1);
        add(l, TFB_OP_SEND_ACT, j, -1);
    }
    if (rest > 0) add(l, TFB_OP_RECV_ACT, warm, -1);
    for (int k = 0; k < rest; k++) {
        int j = warm + k;
        forward(l, j, 0);
        add(l, TFB_OP_SEND_ACT_RECV_GRAD, j, k);
        add(l, TFB_OP_BWD, k, -1);
        if (k == rest - 1) add(l, TFB_OP_SEND_GRAD, k, -1);
        else add(l, TFB_OP_SEND_GRAD_RECV_ACT, k, j + 1);
    }
    for (int k = rest; k < M; k++) {
        add(l, TFB_OP_RECV_GRAD, k, -1);
        add(l, TFB_OP_BWD, k, -1);
        add(l, TFB_OP_SEND_GRAD, k, -1);
    }
}

int tfb_schedule_build(tfb_schedule_kind kind, int P, int stage, int M, tfb_op *ops) {
    op_list l = {.ops = ops, .first = stage == 0, .last = stage == P - 1};
    if (kind == TFB_SCHED_GPIPE) gpipe(&l, M);
    else one_f_one_b(&l, P, stage, M);
    return l.n;
}

int tfb_schedule_in_flight(const tfb_op *ops, int n) {
    int now = 0, most = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == TFB_OP_FWD && ++now > most) most = now;
        if (ops[i].kind == TFB_OP_BWD) now--;
    }
    return most;
}

double tfb_schedule_bubble(int P, int M) { return (double)(P - 1) / (M + P - 1); }

const char *tfb_schedule_name(tfb_schedule_kind kind) { return kind == TFB_SCHED_GPIPE ? "gpipe" : "1f1b"; }
