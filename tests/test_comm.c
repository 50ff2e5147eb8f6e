/* test_comm.c — the communication interface (MPI implementation) and the data-parallel bucketing, run under
 * mpirun with several ranks: every collective, non-blocking all-reduce, point-to-point in a ring, sub-communicators
 * from split, and tfb_ddp's buckets (cover the pool in reverse order, respect tensor boundaries and the size cap,
 * and leave the sum over ranks in place). A check passes only when it passed on every rank; rank 0 prints.
 */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "../bench/comm.h"
#include "../bench/ddp.h"
#include "../bench/grid.h"

static tfb_comm *w;

static void expect_all(const char *name, int ok) {
    w->allreduce(w, &ok, 1, TFB_COMM_I32, TFB_MIN);
    if (w->rank == 0) EXPECT(name, ok, "failed on at least one rank of %d", w->size);
    else if (!ok) test_failures++;
}

static void test_collectives(void) {
    int R = w->size, r = w->rank, tri = R * (R - 1) / 2; /* 0 + 1 + ... + (R - 1) */
    float f[3] = {(float)r, 1.0f, (float)-r};
    w->allreduce(w, f, 3, TFB_COMM_F32, TFB_SUM);
    expect_all("comm_allreduce_sum_f32", f[0] == (float)tri && f[1] == (float)R);
    double d = r;
    w->allreduce(w, &d, 1, TFB_COMM_F64, TFB_MAX);
    expect_all("comm_allreduce_max_f64", d == R - 1);
    float big[5000];
    for (int i = 0; i < 5000; i++) big[i] = (float)(i + r);
    tfb_comm_request *req = NULL;
    int done = 0, polls = 0;
    w->iallreduce(w, big, 5000, TFB_COMM_F32, TFB_SUM, &req);
    while (!done && polls++ < 10000000) w->test(w, req, &done);
    int ok = done;
    for (int i = 0; i < 5000; i++) ok &= big[i] == (float)(R * i + tri);
    expect_all("comm_iallreduce_completes_by_test", ok);
    int mine[2] = {r, 10 * r}, all[64];
    w->allgather(w, mine, all, 2, TFB_COMM_I32);
    ok = 1;
    for (int i = 0; i < R; i++) ok &= all[2 * i] == i && all[2 * i + 1] == 10 * i;
    expect_all("comm_allgather_order", ok);
    float send[64], recv[2];
    for (int i = 0; i < 2 * R; i++) send[i] = (float)(i + r);
    w->reduce_scatter(w, send, recv, 2, TFB_COMM_F32);
    expect_all("comm_reduce_scatter_share", recv[0] == (float)(R * 2 * r + tri) &&
                                                recv[1] == (float)(R * (2 * r + 1) + tri));
    double b = r == 0 ? 42.5 : 0;
    w->bcast(w, &b, 1, TFB_COMM_F64, 0);
    expect_all("comm_bcast", b == 42.5);
}

/* A ring: even ranks send first, odd ranks receive first, so no two ranks wait on each other. */
static void test_ring(void) {
    int R = w->size, r = w->rank, got = -1, next = (r + 1) % R, prev = (r + R - 1) % R;
    if (R == 1) { expect_all("comm_send_recv_ring", 1); return; }
    if (r % 2 == 0) { w->send(w, &r, 1, TFB_COMM_I32, next, 7); w->recv(w, &got, 1, TFB_COMM_I32, prev, 7); }
    else { w->recv(w, &got, 1, TFB_COMM_I32, prev, 7); w->send(w, &r, 1, TFB_COMM_I32, next, 7); }
    expect_all("comm_send_recv_ring", got == prev);
}

static void test_split(void) {
    tfb_comm *sub = NULL;
    w->split(w, w->rank % 2, w->rank, &sub);
    int v = w->rank, want = 0, n = 0;
    sub->allreduce(sub, &v, 1, TFB_COMM_I32, TFB_SUM);
    for (int i = w->rank % 2; i < w->size; i += 2) { want += i; n++; }
    expect_all("comm_split_subgroup_allreduce", v == want && sub->size == n && sub->rank == w->rank / 2);
    sub->destroy(sub);
}

static void test_ddp_buckets(void) {
    /* five tensors of 10, 300, 20, 30, 5 floats; cap 256 floats = 1 KiB: buckets {20, 30, 5}, {300}, {10} */
    tfb_param_info p[5];
    size_t sizes[5] = {10, 300, 20, 30, 5}, off = 0;
    for (int i = 0; i < 5; i++) { p[i] = (tfb_param_info){.offset = off, .numel = sizes[i]}; off += sizes[i]; }
    float *g = malloc(off * sizeof *g);
    for (size_t i = 0; i < off; i++) g[i] = (float)(w->rank + 1) * (float)i;
    tfb_workload wl = {.params = p, .n_params = 5, .numel = off, .grad_pool = g};
    tfb_ddp d;
    tfb_ddp_init(&d, w, &wl, 1024.0 / 1048576.0);
    int ok = d.n_buckets == 3 && d.buckets[0].begin == 310 && d.buckets[0].end == off && d.buckets[1].begin == 10 &&
             d.buckets[2].begin == 0;
    for (int i = 1; i < d.n_buckets; i++) ok &= d.buckets[i].end == d.buckets[i - 1].begin;
    expect_all("ddp_buckets_reverse_order_cover_pool_respect_cap", ok);
    tfb_ddp_ready(&d, 310);  /* the last three tensors are complete: bucket 0 starts, bucket 1 waits */
    int started_early = w->size == 1 || d.next == 1;
    tfb_ddp_finish(&d);
    int R = w->size, sum_1_to_r = R * (R + 1) / 2;
    ok = started_early;
    for (size_t i = 0; i < off; i++) ok &= g[i] == (float)sum_1_to_r * (float)i;
    expect_all("ddp_buckets_sum_over_ranks_in_place", ok);
    tfb_ddp_free(&d);
    free(g);
}

/* Every D x T x P that fits: coordinates cover each group once, sub-communicators have the right members, a
 * sum over each group sees exactly its members, and sendrecv swaps with a neighbour. */
static void test_grid(void) {
    int ok = 1, R = w->size;
    for (int d = 1; d <= R; d++)
        for (int t = 1; d * t <= R; t++)
            for (int p = 1; d * t * p <= R; p++) {
                tfb_grid g;
                ok &= tfb_grid_create(w, d, t, p, &g) == TFB_OK;
                ok &= g.active == (w->rank < d * t * p);
                if (g.active) {
                    int me = w->rank, sum = me, want = 0;
                    ok &= g.tp_comm->size == t && g.dp_comm->size == d && g.pp_comm->size == p && g.job->size == d * t * p;
                    ok &= g.tp_comm->rank == g.tp_rank && g.dp_comm->rank == g.dp_rank && g.pp_comm->rank == g.pp_rank;
                    ok &= me == (g.pp_rank * d + g.dp_rank) * t + g.tp_rank;
                    g.tp_comm->allreduce(g.tp_comm, &sum, 1, TFB_COMM_I32, TFB_SUM);
                    for (int k = 0; k < t; k++) want += me - g.tp_rank + k; /* adjacent ranks form a tensor group */
                    ok &= sum == want;
                    if (p > 1) {
                        int peer = g.pp_rank ^ 1, got = -1;
                        if (peer < p) {
                            g.pp_comm->sendrecv(g.pp_comm, &me, 1, peer, &got, 1, peer, TFB_COMM_I32, 3);
                            ok &= got == (peer * d + g.dp_rank) * t + g.tp_rank;
                        }
                    }
                }
                tfb_grid_destroy(&g);
            }
    expect_all("grid_subcommunicators_members_and_sendrecv", ok);
}

int main(int argc, char **argv) {
    if (tfb_comm_mpi_world(&argc, &argv, &w) != TFB_OK) return 1;
    test_collectives();
    test_ring();
    test_split();
    test_ddp_buckets();
    test_grid();
    int failed = test_failures;
    w->allreduce(w, &failed, 1, TFB_COMM_I32, TFB_MAX);
    tfb_comm_mpi_finalize();
    return failed ? 1 : 0;
}
