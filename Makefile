# tfbench build. `make` configures (probing dependencies by compiling), then builds build/tfbench and the tests.
# `make run` and `make test` first install missing Debian packages (scripts/install-deps.sh).
# `make CUDA=0` forces the CPU-only build; CUDA_ARCHS="80 90" picks the GPU architectures (default 70 75 80 86 89 90,
# less those nvcc cannot target). ARCH_FLAGS overrides -march=native.

BUILD      := build
CC         := mpicc
VERSION    := 0.1.0
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell \
              git diff --quiet HEAD 2>/dev/null || echo -dirty)
ARCH_FLAGS ?= -march=native
CUDA       ?= auto
CFLAGS     := -std=c11 -O3 $(ARCH_FLAGS) -fopenmp -fno-math-errno -Wall -Wextra -D_GNU_SOURCE -I$(BUILD) \
              -DTFB_VERSION='"$(VERSION)"' $(EXTRA_CFLAGS)
LDFLAGS    := -fopenmp -pthread $(EXTRA_LDFLAGS)
NP         ?= 2

LIB_SRC := kernels/check.c kernels/embed_order.c kernels/registry.c kernels/cpu/cpu_backend.c kernels/cpu/cpu_ops.c \
           kernels/cpu/cpu_conv.c kernels/cpu/cpu_nhwc.c kernels/cpu/cpu_shard.c kernels/cpu/cpu_attn.c \
           kernels/cpu/cpu_margin.c bench/comm_mpi.c bench/options.c bench/models.c bench/bert.c bench/bert_layer.c \
           bench/resnet.c bench/workload.c bench/loss_log.c bench/mempool.c bench/npy.c bench/ddp.c bench/optim.c \
           bench/grid.c bench/schedule.c bench/strategy.c bench/train.c bench/power.c bench/energy.c bench/watchdog.c \
           bench/stats.c bench/peak.c bench/report.c bench/run.c bench/topo_main.c bench/links.c bench/links_gpu.c \
           bench/job_backend.c bench/csv.c bench/catalog.c bench/estimate.c bench/doctor.c topology/topo.c \
           topology/gpu_probe.c topology/gpu_p2p.c topology/gpu_bw.c topology/gpu_nccl.c topology/deadline.c \
           topology/nvml.c topology/topo_nvml.c topology/bind.c results/env.c results/summary.c results/results_json.c \
           results/compare.c results/results_read.c results/report_data.c results/report_machines.c \
           results/event_log.c
CUDA_SRC := kernels/cuda/cuda_backend.cu kernels/cuda/cuda_gemm.cu kernels/cuda/cuda_conv.cu kernels/cuda/cuda_ops.cu \
            kernels/cuda/cuda_attn.cu kernels/cuda/cuda_cnn.cu kernels/cuda/cuda_shard.cu kernels/cuda/cuda_comm.cu \
            kernels/cuda/cuda_profile.cu
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o) $(if $(filter 1,$(CUDA_BACKEND)),$(CUDA_SRC:%.cu=$(BUILD)/%.o))
TESTS   := $(BUILD)/tests/test_ops $(BUILD)/tests/test_cnn_ops $(BUILD)/tests/test_bert_layer \
           $(BUILD)/tests/test_model $(BUILD)/tests/test_comm $(BUILD)/tests/test_parallel $(BUILD)/tests/test_topo \
           $(BUILD)/tests/test_catalog $(BUILD)/tests/test_watchdog $(BUILD)/tests/gpu_check \
           $(BUILD)/tests/libfakecuda.so $(BUILD)/tests/libfakenvml.so $(BUILD)/tests/libfakecudart.so \
           $(BUILD)/tests/libfakenccl.so

.PHONY: all configure deps run test sanitize bench gpu-check clean FORCE
all: $(BUILD)/tfbench $(TESTS)

# Probing runs on every make; config.h and config.mk change (and trigger rebuilds) only when a result changes.
configure: $(BUILD)/config.mk
$(BUILD)/config.mk: FORCE
	@CUDA=$(CUDA) CUDA_ARCHS="$(CUDA_ARCHS)" scripts/configure.sh $(BUILD)
$(BUILD)/config.h: $(BUILD)/config.mk
FORCE:
-include $(BUILD)/config.mk
all: $(if $(filter 1,$(CUDA_EMU)),$(BUILD)/tests/gpu_check_emu $(BUILD)/tests/test_emu $(BUILD)/tests/tfbench_emu)

$(BUILD)/%.o: %.c $(BUILD)/config.h $(wildcard kernels/*.h kernels/cpu/*.h bench/*.h results/*.h topology/*.h tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# CUDA device code: machine code per architecture and PTX for the newest (config.mk's NVCC_GENCODE).
NVCC_FLAGS := -std=c++17 -O3 -I$(BUILD) $(NVCC_INCLUDES) $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra,-fPIC \
              --expt-relaxed-constexpr
$(BUILD)/%.o: %.cu $(BUILD)/config.h $(wildcard kernels/*.h kernels/cuda/*.h bench/comm.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# The CUDA backend's kernel files as plain C++ for the CPU (tests/emu/): launches rewritten by unchevron.py, the
# device side emulated by the force-included cuda_emu.h. For gpu_check_emu, which checks them against the CPU backend.
EMU_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Wno-unknown-pragmas -I$(BUILD) -Ikernels/cuda $(CUDA_EMU_INCLUDES) \
                -include tests/emu/cuda_emu.h $(EXTRA_CFLAGS)
EMU_OBJ := $(BUILD)/emu/cuda_gemm.o $(BUILD)/emu/cuda_conv.o $(BUILD)/emu/cuda_ops.o $(BUILD)/emu/cuda_attn.o \
           $(BUILD)/emu/cuda_cnn.o $(BUILD)/emu/cuda_shard.o $(BUILD)/tests/emu/cuda_emu.o \
           $(BUILD)/tests/emu/cuda_emu_backend.o $(BUILD)/tests/emu/emu_cublas.o $(BUILD)/tests/emu/emu_cudnn.o
# with NCCL's header: the communicator too, over emu_nccl.c (NCCL's calls done by MPI, compiled as C by mpicc)
EMU_OBJ += $(if $(filter 1,$(EMU_NCCL)),$(BUILD)/emu/cuda_comm.o $(BUILD)/tests/emu/emu_nccl.o)
EMU_DEPS := $(BUILD)/config.h tests/emu/cuda_emu.h $(wildcard kernels/*.h kernels/cuda/*.h tests/emu/*.h)
$(BUILD)/emu/%.cpp: kernels/cuda/%.cu tests/emu/unchevron.py
	@mkdir -p $(dir $@)
	python3 tests/emu/unchevron.py $< $@
.PRECIOUS: $(BUILD)/emu/%.cpp
$(BUILD)/emu/%.o: $(BUILD)/emu/%.cpp $(EMU_DEPS)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(BUILD)/tests/emu/%.o: tests/emu/%.cpp $(EMU_DEPS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(BUILD)/tests/emu/emu_nccl.o: tests/emu/emu_nccl.c $(BUILD)/config.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_EMU_INCLUDES) -c $< -o $@
$(BUILD)/tests/gpu_check_emu.o: tests/gpu_check.c $(BUILD)/config.h $(wildcard kernels/*.h tests/*.h tests/emu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DTFB_GPU_CHECK_EMU=1 -c $< -o $@
$(BUILD)/tests/gpu_check_emu: $(BUILD)/tests/gpu_check_emu.o $(EMU_OBJ) $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lstdc++ -lm
# tfbench with `--device cuda` on the emulated CUDA backend (memory and marks on the CPU backend; communication
# through cuda_comm.cu over emu_nccl.c where EMU_NCCL): its registry object comes first, so the archive's is not
# linked.
$(BUILD)/tests/registry_emu.o: kernels/registry.c $(BUILD)/config.h $(wildcard kernels/*.h tests/emu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DTFB_REGISTRY_EMU=1 -c $< -o $@
$(BUILD)/tests/tfbench_emu: $(BUILD)/tests/registry_emu.o $(BUILD)/bench/main.o $(EMU_OBJ) $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lstdc++ -lm
$(BUILD)/tests/test_emu: $(BUILD)/tests/emu/test_emu.o $(BUILD)/tests/emu/cuda_emu.o
	$(CXX) $(LDFLAGS) $^ -o $@

$(BUILD)/results/env.o: CFLAGS += -DTFB_GIT_COMMIT='"$(GIT_COMMIT)"'

$(BUILD)/libtfb.a: $(LIB_OBJ)
	ar rcs $@ $^

$(BUILD)/tfbench: $(BUILD)/bench/main.o $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lm

$(BUILD)/tests/libfake%.so: tests/fake_lib%.c
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -O1 -Wall -Wextra $< -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lm

deps:
	@scripts/install-deps.sh

run: deps
	@$(MAKE) --no-print-directory all
	scripts/run-default.sh

test: deps
	@$(MAKE) --no-print-directory all
	tests/run.sh

$(BUILD)/bench_conv: $(BUILD)/scripts/bench_conv.o $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lm

$(BUILD)/bench_fused: $(BUILD)/scripts/bench_fused.o $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lm

$(BUILD)/bench_batch: $(BUILD)/scripts/bench_batch.o $(BUILD)/libtfb.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CONFIG_LIBS) -lm

# The whole test suite, MPI tests included, against an AddressSanitizer + UndefinedBehaviorSanitizer build.
# Leak detection is off: the MPI library keeps allocations until exit by design.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
sanitize: deps
	@$(MAKE) --no-print-directory BUILD=build-sanitize EXTRA_CFLAGS="$(SAN_FLAGS) -O1" EXTRA_LDFLAGS="$(SAN_FLAGS)" all
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 TFB_BUILD=build-sanitize tests/run.sh

# The CUDA backend against the CPU backend, training steps and a short benchmark, on a machine with a GPU.
# DEBS=DIR: packages saved by `scripts/offline-deps.sh fetch`, unpacked when the machine lacks MPI and the rest.
gpu-check:
	scripts/gpu-check.sh

bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench_conv $(BUILD)/bench_fused $(BUILD)/bench_batch
	scripts/bench-cpu.sh
	scripts/bench-parallel.sh
	$(BUILD)/bench_fused cpu 2
	$(BUILD)/bench_batch

clean:
	rm -rf $(BUILD) build-sanitize
