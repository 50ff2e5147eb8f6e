/* cuda_emu.cpp — the scheduler behind tests/emu/cuda_emu.h: a block's threads as fibers on the host thread,
 * barriers and warp shuffles as the points where they meet, and the few CUDA runtime calls the kernel files make
 * (memset, copies, the last error) done synchronously on host memory. With TFB_EMU_LEAKS=1 it says at exit how many
 * device buffers, events and streams are still live.
 *
 * A fiber switch on x86-64 is six register pushes and a stack swap (tfb_emu_switch below), announced to
 * AddressSanitizer when it is on; elsewhere it is ucontext's, whose signal-mask system calls cost about as much as
 * the work of a small kernel's thread.
 *
 * Not here: the backend built from these kernels (cuda_emu_backend.cpp), anything of a real GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include "cuda_emu.h"

#define EMU_MAX_THREADS 1024
#define EMU_STACK_BYTES (256 * 1024)

#if defined(__x86_64__)
#define EMU_ASM_SWITCH 1
#else
#define EMU_ASM_SWITCH 0
#endif

/* AddressSanitizer's fiber annotations: start before a switch (the destination's stack; a NULL save: the fiber
 * leaving has ended), finish after one (the stack left, learned by the fiber that arrives). */
#if EMU_ASM_SWITCH && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)(save))
#define ASAN_FINISH(save, bottom, size) ((void)(save))
#endif

enum { F_RUN, F_BARRIER, F_SHUFFLE, F_DONE };

typedef struct {
#if EMU_ASM_SWITCH
    void *sp;   /* the fiber's saved stack pointer, its callee-saved registers pushed below it */
    void *fake; /* AddressSanitizer's fake stack of the fiber while it is switched out */
#else
    ucontext_t uc;
#endif
    int state;
    uint3 tid;
    uint64_t bits_in, bits_out; /* a shuffle's value given and received */
    int src;                    /* the lane it reads, or -1: its own value (out of the segment) */
    unsigned mask;
} emu_fiber;

static struct {
    emu_fiber *fibers;
    char *stacks;
#if EMU_ASM_SWITCH
    void *scheduler_sp;
    const void *scheduler_bottom; /* the scheduler's stack, for AddressSanitizer */
    size_t scheduler_size;
    void *ended_sp; /* where an ended fiber's last switch stores its stack pointer, never read */
#else
    ucontext_t scheduler;
#endif
    int cur, threads, reverse, order_set;
    void (*body)(void *);
    void *arg;
    const char *kernel;
    cudaError_t last;
} E;

uint3 tfb_emu_thread_idx, tfb_emu_block_idx;
dim3 tfb_emu_block_dim, tfb_emu_grid_dim;

static void emu_die(const char *what) {
    fprintf(stderr, "cuda-emu: kernel %s, block (%u, %u, %u), thread (%u, %u, %u): %s\n", E.kernel, blockIdx.x,
            blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, what);
    abort();
}

#if EMU_ASM_SWITCH
/* tfb_emu_switch(save, to): pushes the System V callee-saved registers, stores the stack pointer in *save, takes
 * `to` as the stack pointer and pops the registers saved there; `ret` then resumes whatever pushed them. The
 * floating-point control state stays shared: no kernel changes it. */
extern "C" void tfb_emu_switch(void **save, void *to);
__asm__(".text\n"
        ".globl tfb_emu_switch\n"
        ".type tfb_emu_switch, @function\n"
        "tfb_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size tfb_emu_switch, .-tfb_emu_switch\n");
#endif

/* scheduler -> fiber i, until it yields or ends */
static void fiber_resume(int i) {
#if EMU_ASM_SWITCH
    void *fake = NULL;
    ASAN_START(&fake, E.stacks + (size_t)i * EMU_STACK_BYTES, EMU_STACK_BYTES);
    tfb_emu_switch(&E.scheduler_sp, E.fibers[i].sp);
    ASAN_FINISH(fake, NULL, NULL);
#else
    if (swapcontext(&E.scheduler, &E.fibers[i].uc) != 0) emu_die("swapcontext failed");
#endif
}

static void fiber_yield(int state) {
    emu_fiber *f = &E.fibers[E.cur];
    f->state = state;
#if EMU_ASM_SWITCH
    ASAN_START(&f->fake, E.scheduler_bottom, E.scheduler_size);
    tfb_emu_switch(&f->sp, E.scheduler_sp);
    ASAN_FINISH(f->fake, &E.scheduler_bottom, &E.scheduler_size);
#else
    if (swapcontext(&f->uc, &E.scheduler) != 0) emu_die("swapcontext failed");
#endif
}

static void fiber_main(void) {
    ASAN_FINISH(NULL, &E.scheduler_bottom, &E.scheduler_size);
    E.body(E.arg);
    E.fibers[E.cur].state = F_DONE;
#if EMU_ASM_SWITCH /* no local has its address taken: AddressSanitizer would leave this frame's redzones */
    ASAN_START(NULL, E.scheduler_bottom, E.scheduler_size);
    tfb_emu_switch(&E.ended_sp, E.scheduler_sp); /* never resumed */
    emu_die("an ended fiber was resumed");
#endif /* else uc_link returns to the scheduler */
}

void tfb_emu_sync_block(void) { fiber_yield(F_BARRIER); }

int tfb_emu_lane(void) { return E.cur & 31; }

void tfb_emu_fail(const char *what) { emu_die(what); }

uint64_t tfb_emu_shuffle(unsigned mask, uint64_t bits, int mode, int arg, int width) {
    emu_fiber *f = &E.fibers[E.cur];
    int lane = E.cur & 31, seg = lane & ~(width - 1), src;
    if (width < 1 || width > 32 || (width & (width - 1))) emu_die("shuffle width not a power of two up to 32");
    if (!(mask >> lane & 1u)) emu_die("shuffle by a lane outside its own mask");
    src = mode == 0 ? lane ^ arg : mode == 1 ? lane + arg : seg + (arg & (width - 1));
    f->src = src >= seg && src < seg + width ? src : -1;
    f->bits_in = bits;
    f->mask = mask;
    fiber_yield(F_SHUFFLE);
    return f->bits_out;
}

static void fiber_start(int i) {
    emu_fiber *f = &E.fibers[i];
    unsigned bx = blockDim.x, by = blockDim.y;
    f->tid = make_uint3(i % bx, i / bx % by, i / (bx * by));
    f->state = F_RUN;
#if EMU_ASM_SWITCH
    /* the stack as tfb_emu_switch leaves it: six zero registers, then fiber_main as the return address, entered
     * with the stack 8 bytes below a 16-byte boundary as after a call (a null return address above it) */
    void **sp = (void **)(E.stacks + (size_t)(i + 1) * EMU_STACK_BYTES);
    *--sp = NULL;
    *--sp = (void *)fiber_main;
    for (int r = 0; r < 6; r++) *--sp = NULL;
    f->sp = sp;
    f->fake = NULL;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = E.stacks + (size_t)i * EMU_STACK_BYTES;
    f->uc.uc_stack.ss_size = EMU_STACK_BYTES;
    f->uc.uc_link = &E.scheduler;
    makecontext(&f->uc, fiber_main, 0);
#endif
}

/* Runs the lanes of warp w that may run, in lane order (reversed with E.reverse), each until it reaches a sync
 * point or ends. */
static void warp_sweep(int w, int n) {
    for (int k = 0; k < n; k++) {
        int i = w * 32 + (E.reverse ? n - 1 - k : k);
        if (E.fibers[i].state != F_RUN) continue;
        E.cur = i;
        threadIdx = E.fibers[i].tid;
        fiber_resume(i);
    }
}

/* Completes warp w's shuffle when every lane of its mask has reached it; 0 when no lane waits on one. */
static int warp_shuffle(int w, int n) {
    emu_fiber *lanes = &E.fibers[w * 32];
    int waiting = -1;
    for (int l = 0; l < n; l++)
        if (lanes[l].state == F_SHUFFLE) waiting = l;
    if (waiting < 0) return 0;
    unsigned mask = lanes[waiting].mask;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        E.cur = w * 32 + (l < n ? l : waiting);
        threadIdx = E.fibers[E.cur].tid;
        if (l >= n || lanes[l].state != F_SHUFFLE) emu_die("a lane of the shuffle's mask never reaches it");
        if (lanes[l].mask != mask) emu_die("the lanes of one shuffle disagree on its mask");
    }
    for (int l = 0; l < n; l++)
        if (lanes[l].state == F_SHUFFLE) {
            int s = lanes[l].src;
            lanes[l].bits_out = s >= 0 && (mask >> s & 1u) ? lanes[s].bits_in : lanes[l].bits_in;
            lanes[l].state = F_RUN;
        }
    return 1;
}

/* Warp by warp (last first with E.reverse), each as far as it can go before the block's next barrier: a warp runs
 * ahead of the others as far as CUDA allows, so a read of shared memory that a barrier does not order sees it. */
static void block_run(void) {
    int warps = (E.threads + 31) / 32;
    for (int i = 0; i < E.threads; i++) fiber_start(i);
    for (;;) {
        int done = 0;
        for (int k = 0; k < warps; k++) {
            int w = E.reverse ? warps - 1 - k : k, n = E.threads - w * 32 < 32 ? E.threads - w * 32 : 32;
            do warp_sweep(w, n);
            while (warp_shuffle(w, n));
        }
        for (int i = 0; i < E.threads; i++) done += E.fibers[i].state == F_DONE;
        if (done == E.threads) return;
        for (int i = 0; i < E.threads; i++) /* only barriers and ended threads are left: release the barrier */
            if (E.fibers[i].state == F_BARRIER) E.fibers[i].state = F_RUN;
    }
}

static int launch_valid(dim3 g, dim3 b) {
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    return threads >= 1 && threads <= EMU_MAX_THREADS && b.z <= 64 && g.x >= 1 && g.x <= 2147483647u && g.y >= 1 &&
           g.y <= 65535 && g.z >= 1 && g.z <= 65535;
}

void tfb_emu_order(int reverse) {
    E.reverse = reverse;
    E.order_set = 1;
}

void tfb_emu_run(const char *kernel, dim3 grid, dim3 block, void (*body)(void *), void *arg) {
    if (!launch_valid(grid, block)) {
        E.last = cudaErrorInvalidConfiguration;
        return;
    }
    if (!E.order_set) {
        const char *r = getenv("TFB_EMU_REVERSE");
        tfb_emu_order(r && r[0] == '1');
    }
    if (!E.fibers) {
        E.fibers = (emu_fiber *)calloc(EMU_MAX_THREADS, sizeof *E.fibers);
        E.stacks = (char *)malloc((size_t)EMU_MAX_THREADS * EMU_STACK_BYTES);
        if (!E.fibers || !E.stacks) { fprintf(stderr, "cuda-emu: out of memory for fibers\n"); abort(); }
    }
    E.kernel = kernel;
    E.body = body;
    E.arg = arg;
    E.threads = (int)(block.x * block.y * block.z);
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++) /* blocks one after another, in index order or reversed */
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = E.reverse ? make_uint3(grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z) : make_uint3(x, y, z);
                block_run();
            }
}

/* ---- the runtime calls of the kernel files, synchronous on host memory ---- */

cudaError_t tfb_emu_get_last_error(void) {
    cudaError_t e = E.last;
    E.last = cudaSuccess;
    return e;
}

const char *tfb_emu_error_string(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
                                                                            : "emulated CUDA error";
}

cudaError_t tfb_emu_memset(void *p, int value, size_t bytes, cudaStream_t s) {
    (void)s;
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t tfb_emu_memcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    (void)s;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t tfb_emu_memcpy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    (void)s;
    if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
    for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}

/* ---- device memory, streams and events, for the communicator (cuda_comm.cu) ---- */

/* The ranges the emulated backend handed out as device memory (start -> bytes), for cudaPointerGetAttributes. */
static std::map<uintptr_t, size_t> &device_ranges(void) {
    static std::map<uintptr_t, size_t> m;
    return m;
}

static void leak_watch(void);

void tfb_emu_device_range(const void *p, size_t bytes, int add) {
    if (!p) return;
    leak_watch();
    if (add) device_ranges()[(uintptr_t)p] = bytes;
    else device_ranges().erase((uintptr_t)p);
}

/* Device memory where p lies in a range the backend allocated, else host memory CUDA does not know of. */
cudaError_t tfb_emu_pointer_attributes(cudaPointerAttributes *a, const void *p) {
    const std::map<uintptr_t, size_t> &m = device_ranges();
    auto it = m.upper_bound((uintptr_t)p);
    int dev = it != m.begin() && (uintptr_t)p < (--it)->first + it->second;
    memset(a, 0, sizeof *a);
    a->type = dev ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    a->device = 0;
    a->devicePointer = dev ? (void *)p : NULL;
    return cudaSuccess;
}

/* Streams and events. Kernels and copies run when they are queued, on the compute stream (the default stream, 0).
 * A stream made with cudaStreamCreate (a communicator's) instead keeps what is deferred to it (tfb_emu_defer: the
 * emulated NCCL's operations) until something needs it, as a GPU runs it at a time of its own: a stream that waits
 * for an event of that stream (cudaStreamWaitEvent), the stream's end, or tfb_emu_flush_all (the emulated
 * ncclCommDestroy). A sync of the compute stream does not run it, as a GPU's does not wait for work the compute
 * stream does not depend on. Deferred work runs in the order it was queued over all streams, which is the host's
 * program order, so the ranks' MPI calls match as they would if each ran at once. An event marks how much of its
 * stream came before it and has happened once that much has run; a query never runs anything. So work that reads a
 * collective's result without waiting for it sees the old data, and the watchdog sees a collective recorded but not
 * yet run.
 *
 * Every event is checked to exist (created, not yet destroyed) wherever it is used, against the set of live
 * events. One lock guards the set, the streams' counts and the deferred work: tfbench's watchdog queries events
 * from its own thread (the backend's pending_text). Deferred work runs on the host thread, outside the lock. */
struct emu_stream {
    unsigned long long queued, done; /* deferred works queued to this stream, and run */
};
struct emu_event {
    emu_stream *s;                   /* NULL: recorded on the compute stream (or never), so it has happened */
    unsigned long long target;       /* it has happened once s->done reaches this */
};
struct emu_work {
    void (*run)(void *);
    void *arg;
    emu_stream *s;
};

static std::set<uintptr_t> &live_events(void) {
    static std::set<uintptr_t> s;
    return s;
}
static std::deque<emu_work> &deferred(void) {
    static std::deque<emu_work> q;
    return q;
}
static std::mutex state_lock;
static std::atomic<int> live_streams(0);

static emu_event *event_check(cudaEvent_t e) {
    std::lock_guard<std::mutex> hold(state_lock);
    if (!live_events().count((uintptr_t)(void *)e)) {
        fprintf(stderr, "cuda emulator: an event used that was never created or was destroyed\n");
        abort();
    }
    return (emu_event *)(void *)e;
}

/* Runs the oldest deferred work; 0 when there was none. */
static int run_oldest(void) {
    emu_work w;
    {
        std::lock_guard<std::mutex> hold(state_lock);
        if (deferred().empty()) return 0;
        w = deferred().front();
        deferred().pop_front();
    }
    w.run(w.arg);
    std::lock_guard<std::mutex> hold(state_lock);
    w.s->done++;
    return 1;
}

/* Deferred work, oldest first, until s has run its first `target` works. */
static void run_until(emu_stream *s, unsigned long long target) {
    for (;;) {
        {
            std::lock_guard<std::mutex> hold(state_lock);
            if (s->done >= target) return;
        }
        if (!run_oldest()) return;
    }
}

extern "C" void tfb_emu_defer(cudaStream_t stream, void (*run)(void *), void *arg) {
    emu_stream *s = (emu_stream *)(void *)stream;
    if (!s) { run(arg); return; }
    std::lock_guard<std::mutex> hold(state_lock);
    deferred().push_back(emu_work{run, arg, s});
    s->queued++;
}

extern "C" void tfb_emu_flush_all(void) {
    while (run_oldest()) {}
}

cudaError_t tfb_emu_event_create(cudaEvent_t *e, unsigned flags) {
    (void)flags;
    leak_watch();
    emu_event *p = (emu_event *)calloc(1, sizeof *p);
    if (!p) return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> hold(state_lock);
    live_events().insert((uintptr_t)p);
    *e = (cudaEvent_t)(void *)p;
    return cudaSuccess;
}

cudaError_t tfb_emu_event_destroy(cudaEvent_t e) {
    emu_event *ev = event_check(e);
    std::lock_guard<std::mutex> hold(state_lock);
    live_events().erase((uintptr_t)ev);
    free(ev);
    return cudaSuccess;
}

cudaError_t tfb_emu_event_record(cudaEvent_t e, cudaStream_t stream) {
    emu_event *ev = event_check(e);
    emu_stream *s = (emu_stream *)(void *)stream;
    std::lock_guard<std::mutex> hold(state_lock);
    ev->s = s;
    ev->target = s ? s->queued : 0;
    return cudaSuccess;
}

cudaError_t tfb_emu_event_query(cudaEvent_t e) {
    emu_event *ev = event_check(e);
    std::lock_guard<std::mutex> hold(state_lock);
    return !ev->s || ev->s->done >= ev->target ? cudaSuccess : cudaErrorNotReady;
}

/* A stream that waits for another's event needs what came before it there: it runs now. */
cudaError_t tfb_emu_stream_wait_event(cudaStream_t stream, cudaEvent_t e, unsigned flags) {
    (void)flags;
    emu_event *ev = event_check(e);
    emu_stream *s, *from;
    unsigned long long target;
    {
        std::lock_guard<std::mutex> hold(state_lock);
        s = (emu_stream *)(void *)stream;
        from = ev->s;
        target = ev->target;
    }
    if (from && from != s) run_until(from, target);
    return cudaSuccess;
}

cudaError_t tfb_emu_stream_create(cudaStream_t *s, unsigned flags) {
    (void)flags;
    leak_watch();
    emu_stream *p = (emu_stream *)calloc(1, sizeof *p);
    live_streams += p != NULL;
    *s = (cudaStream_t)(void *)p;
    return p ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* As on a GPU, the stream's work completes even though its handle goes. */
cudaError_t tfb_emu_stream_destroy(cudaStream_t stream) {
    emu_stream *s = (emu_stream *)(void *)stream;
    if (!s) return cudaSuccess;
    run_until(s, s->queued);
    live_streams--;
    free(s);
    return cudaSuccess;
}

/* TFB_EMU_LEAKS=1: at exit, how many device buffers, events and streams are still live, and how many deferred
 * operations never ran, so a test can see that a job that ended well released all it made (through the backend's
 * destroy and each communicator's) and left no collective behind. */
static void leak_report(void) {
    std::lock_guard<std::mutex> hold(state_lock);
    fprintf(stderr, "cuda emulator: live at exit: %zu device buffers, %zu events, %d streams, %zu deferred "
            "operations\n", device_ranges().size(), live_events().size(), live_streams.load(), deferred().size());
}

/* Registers leak_report once, after the sets it reads exist, so it runs before their destructors. */
static void leak_watch(void) {
    static const bool watching = [] {
        const char *v = getenv("TFB_EMU_LEAKS");
        if (!v || strcmp(v, "1") != 0) return false;
        device_ranges();
        live_events();
        deferred();
        return atexit(leak_report) == 0;
    }();
    (void)watching;
}

cudaError_t tfb_emu_set_device(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
