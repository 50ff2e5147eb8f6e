/* schedule.h — the order in which one pipeline stage runs forward and backward micro-batches in a training step,
 * with the point-to-point transfers between stages, as a list of operations.
 *
 * GPipe: every forward, then every backward. 1F1B (PipeDream-Flush, as in Megatron-LM): stage i runs
 * min(P - i - 1, M) warm-up forwards, then alternates one forward and one backward, then drains the backwards,
 * so it never holds more than min(P - i, M) micro-batches of activations. Where a stage sends to a neighbour
 * while expecting something back from it, the two transfers are one paired send-receive, which is what keeps
 * blocking transports from deadlocking. Operations that would talk past the ends of the pipeline are left out.
 * This file neither computes nor communicates: the run driver walks the list.
 */
#ifndef TFB_SCHEDULE_H
#define TFB_SCHEDULE_H

typedef enum { TFB_SCHED_GPIPE = 0, TFB_SCHED_1F1B = 1 } tfb_schedule_kind;

typedef enum {
    TFB_OP_FWD,            /* forward of micro-batch mb */
    TFB_OP_BWD,            /* backward of micro-batch mb */
    TFB_OP_RECV_ACT,       /* receive mb's input activation from the previous stage */
    TFB_OP_SEND_ACT,       /* send mb's output activation to the next stage */
    TFB_OP_RECV_GRAD,      /* receive the gradient of mb's output from the next stage */
    TFB_OP_SEND_GRAD,      /* send the gradient of mb's input to the previous stage */
    TFB_OP_SEND_ACT_RECV_GRAD, /* paired with the next stage: send mb's output, receive mb2's output gradient */
    TFB_OP_SEND_GRAD_RECV_ACT  /* paired with the previous stage: send mb's input gradient, receive mb2's input */
} tfb_op_kind;

typedef struct {
    tfb_op_kind kind;
    int mb, mb2;
} tfb_op;

/* Fills ops (room for 8 * M entries) for stage `stage` of P with M micro-batches; returns the count. */
int tfb_schedule_build(tfb_schedule_kind kind, int P, int stage, int M, tfb_op *ops);
/* The most micro-batches whose activations the list holds at once (forward done, backward not yet). */
int tfb_schedule_in_flight(const tfb_op *ops, int n);
/* The bubble fraction of an ideal pipeline: (P - 1) / (M + P - 1). */
double tfb_schedule_bubble(int P, int M);
const char *tfb_schedule_name(tfb_schedule_kind kind);

#endif
