# f8 — one plain Makefile.
#   make                 library (static + shared), libf8train.a, tests, benchmarks, trainer
#   make test            build and run every test (GPU tests skip without a GPU)
#   make run             run the main program on its embedded default
#   make bench           run the benchmarks (GPU)
#   make install PREFIX=/usr/local
#   make config          print the knobs as resolved here (CUDA=0|1 ...)
#   make fuzz            libFuzzer for FUZZ_SECONDS on FUZZ_TARGET: checkpoint (default),
#                        shards, text, meta, onnx or json (clang; tools/fuzz.sh)
# Knobs: CUDA=0|1 (default: 1 only where the GPU code can run: nvcc on PATH and
# a GPU visible, i.e. /dev/nvidia0 exists or `nvidia-smi -L` succeeds; CUDA=1
# builds it anyway, as CI does), SM=90, SAN=1 (ASan+UBSan build in build/san),
# BLAS_LIB=-lopenblas (CPU GEMMs through sgemm_), NCCL_HOME (where NCCL is,
# when neither next to the toolkit nor in the system's directories).

# No built-in rules: every rule is below (and none guesses how to remake a .d file).
MAKEFLAGS += --no-builtin-rules
CC       ?= cc
NVCC     ?= nvcc
CUDA_HOME ?= /usr/local/cuda
# Probed once (:=), and only when not given.
ifeq ($(origin CUDA),undefined)
CUDA := $(shell command -v $(NVCC) >/dev/null 2>&1 && \
          { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; } && echo 1 || echo 0)
endif
SM       ?= 90
SAN      ?= 0
BLAS_LIB ?=
PREFIX   ?= /usr/local
VERSION  := 0.1.0
SOMAJOR  := 0
FUZZ_SECONDS ?= 600

BUILD := build
ifeq ($(SAN),1)
BUILD := build/san
endif

CFLAGS_BASE := -std=c11 -O2 -g -Wall -Wextra -Wpedantic -Werror -ffp-contract=off -fPIC \
               -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc
# --compress-mode=size: the device code is stored compressed (the SASS is the
# same; the driver unpacks it on load). Every program links all of it, so an
# uncompressed build takes about 4 GB (42 MB of device code in each of ~80
# test programs) against 1 GB compressed.
NVFLAGS  := -std=c++17 -O3 -g -fmad=false -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Iinclude -Isrc \
            -gencode=arch=compute_$(SM),code=sm_$(SM) --compress-mode=size -Werror all-warnings
LDLIBS   := -lm -lpthread
SANFLAGS :=
ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
CFLAGS_ALL := $(CFLAGS_BASE) $(SANFLAGS) $(CFLAGS)

ifneq ($(BLAS_LIB),)
CFLAGS_ALL += -DF8_HAVE_BLAS=1
LDLIBS += $(BLAS_LIB)
endif

LIB_C := $(wildcard src/core/*.c src/modules/*.c src/nn/*.c src/optim/*.c src/io/*.c src/cpu/*.c src/comm/*.c)
# NCCL (src/comm/nccl.c, CUDA builds only): found next to the toolkit
# ($(CUDA_HOME)/include/nccl.h, lib64/libnccl.so: this machine and CI) or in
# the system's directories (/usr/include, /usr/lib/x86_64-linux-gnu: the
# libnccl-dev package, as on the GPU machine); NCCL_HOME=DIR for another
# place (DIR/include, DIR/lib).
NCCL_HOME ?=
ifeq ($(CUDA),1)
LIB_C  := $(filter-out src/core/no_cuda.c src/cpu/no_cuda_rowwise.c src/comm/no_nccl.c,$(LIB_C))
LIB_CU := $(wildcard src/cuda/*.cu)
ifneq ($(NCCL_HOME),)
LDLIBS += -L$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib
CFLAGS_ALL += -I$(NCCL_HOME)/include
endif
LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lnccl -ldl -lstdc++
CFLAGS_ALL += -I$(CUDA_HOME)/include
else
LIB_C  := $(filter-out src/comm/nccl.c,$(LIB_C))
LIB_CU :=
endif

LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)

# libf8train.a: the trainer's pieces (train/*.c but main.c, one header
# train/f8train.h), linked by f8_train, the trainer's tests and fuzz targets.
TRAIN_LIB_C   := $(filter-out train/main.c,$(wildcard train/*.c))
TRAIN_LIB_OBJ := $(TRAIN_LIB_C:%.c=$(BUILD)/%.o)
TRAIN_LIB     := $(BUILD)/libf8train.a

TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/%.o)
# The fuzz targets as objects (fuzz_data.c twice: shards and text), linked by
# the tests that replay their corpora.
FUZZ_OBJ  := $(addprefix $(BUILD)/fuzz/,fuzz_checkpoint.o fuzz_meta.o fuzz_onnx.o \
               fuzz_data_shards.o fuzz_data_text.o fuzz_json.o replay.o)
# Benchmarks time the GPU with CUDA events: built only with CUDA.
BENCH_SRC := $(if $(filter 1,$(CUDA)),$(wildcard bench/bench_*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
BENCH_CU_OBJ := $(if $(filter 1,$(CUDA)),$(patsubst %.cu,$(BUILD)/%.o,$(wildcard bench/*.cu)))
TRAIN_BIN := $(BUILD)/f8_train
EXAMPLE_BIN := $(BUILD)/examples/example_linear

.PHONY: all test run bench install clean fuzz config
.SECONDARY: $(BENCH_CU_OBJ)
all: $(BUILD)/libf8.a $(BUILD)/libf8.so $(TRAIN_LIB) $(TEST_BIN) $(BENCH_BIN) $(TRAIN_BIN) $(EXAMPLE_BIN)

# Every object depends on the headers it includes (-MMD -MP: a .d file beside
# it, read below), and on nothing else.
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

# The library's objects: hidden unless f8.h marks them F8_API, so libf8.so
# exports only its API (programs and tests keep default visibility: a test's
# __asan_default_options must stay visible to the sanitizer runtime).
$(BUILD)/src/%.o: CFLAGS_ALL += -fvisibility=hidden
$(BUILD)/tests/%.o: CFLAGS_ALL += -Itests -Itrain
# The trainer sees the public API only: include/, not src/.
$(BUILD)/train/%.o: CFLAGS_ALL := $(filter-out -Isrc,$(CFLAGS_ALL)) -Itrain
$(BUILD)/fuzz/%.o: CFLAGS_ALL += -Itrain
$(BUILD)/fuzz/fuzz_data_%.o: fuzz/fuzz_data.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -DFUZZ_DATA_$(shell echo $* | tr a-z A-Z) -MMD -MP -c $< -o $@

$(BUILD)/libf8.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library carries its SONAME (libf8.so.0): programs linked
# against it depend on the major version, not on the development link.
$(BUILD)/libf8.so: $(LIB_OBJ)
	$(CC) -shared $(SANFLAGS) -Wl,-soname,libf8.so.$(SOMAJOR) -o $@ $^ $(LDLIBS)

$(TRAIN_LIB): $(TRAIN_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# A test is its object, any fuzz target objects it names below, and the two
# archives (the linker takes from libf8train.a only what a test uses).
$(TEST_BIN): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(TRAIN_LIB) $(BUILD)/libf8.a
	$(CC) $(SANFLAGS) $(filter %.o,$^) -o $@ $(TRAIN_LIB) $(BUILD)/libf8.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BENCH_CU_OBJ) $(BUILD)/libf8.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -Ibench $< -o $@ $(BENCH_CU_OBJ) $(BUILD)/libf8.a $(LDLIBS)

$(TRAIN_BIN): $(BUILD)/train/main.o $(TRAIN_LIB) $(BUILD)/libf8.a
	$(CC) $(SANFLAGS) $< -o $@ $(TRAIN_LIB) $(BUILD)/libf8.a $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libf8.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP $< -o $@ $(BUILD)/libf8.a $(LDLIBS)

test: $(TEST_BIN) $(EXAMPLE_BIN)
	@sh tests/run.sh $(TEST_BIN)

run: $(TRAIN_BIN)
	./$(TRAIN_BIN)

bench: $(BENCH_BIN)
	@set -e; for b in $(BENCH_BIN); do ./$$b; done

# include/: f8.h and its topic headers f8/*.h. lib/: libf8.a, libf8.so.$(VERSION) with the links libf8.so.0 (the SONAME,
# what programs load) and libf8.so (what -lf8 finds); f8.pc (see f8.pc.in
# for how --static picks libf8.a).
install: $(BUILD)/libf8.a $(BUILD)/libf8.so
	install -d $(DESTDIR)$(PREFIX)/include/f8 $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/f8.h $(DESTDIR)$(PREFIX)/include/f8.h
	install -m 644 $(wildcard include/f8/*.h) $(DESTDIR)$(PREFIX)/include/f8/
	install -m 644 $(BUILD)/libf8.a $(DESTDIR)$(PREFIX)/lib/libf8.a
	install -m 755 $(BUILD)/libf8.so $(DESTDIR)$(PREFIX)/lib/libf8.so.$(VERSION)
	ln -sf libf8.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libf8.so.$(SOMAJOR)
	ln -sf libf8.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libf8.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS@|$(LDLIBS)|' f8.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/f8.pc

# The fuzz target is built by clang from the CPU-only library sources.
FUZZ_LIB_C := $(filter-out src/comm/nccl.c,$(wildcard src/core/*.c src/modules/*.c src/nn/*.c src/optim/*.c src/io/*.c src/cpu/*.c src/comm/*.c))
FUZZ_TARGET ?= checkpoint
fuzz:
	FUZZ_TARGET=$(FUZZ_TARGET) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_LIB_SRC="$(FUZZ_LIB_C)" sh tools/fuzz.sh run

# test_python runs python/tests/run_cpu.py over this build's shared library
# (a sanitizer build's needs the ASan runtime preloaded into Python).
PY_ASAN := $(if $(filter 1,$(SAN)),-DF8_ASAN_RT='"$(shell $(CC) -print-file-name=libasan.so)"')
$(BUILD)/tests/test_python.o: CFLAGS_ALL += -DF8_LIBSO='"$(BUILD)/libf8.so"' $(PY_ASAN)
$(BUILD)/tests/test_python: $(BUILD)/libf8.so $(wildcard python/f8/*.py python/tests/*.py)
# test_exports reads libf8.so's dynamic symbols (nm) against the headers' F8_API list.
$(BUILD)/tests/test_exports.o: CFLAGS_ALL += -DF8_LIBSO='"$(BUILD)/libf8.so"'
$(BUILD)/tests/test_exports: $(BUILD)/libf8.so

# test_hf_doors runs this build's f8_train on hostile files (a subprocess).
$(BUILD)/tests/test_hf_doors.o: CFLAGS_ALL += -DF8_TRAIN='"$(TRAIN_BIN)"'
$(BUILD)/tests/test_hf_doors: $(TRAIN_BIN)
$(BUILD)/tests/test_hf_llama.o: CFLAGS_ALL += -DF8_TRAIN='"$(TRAIN_BIN)"'
$(BUILD)/tests/test_hf_llama: $(TRAIN_BIN)

# The fuzz replay tests (and test_onnx) link their fuzz target and the replay driver.
$(BUILD)/tests/test_fuzz_replay: $(BUILD)/fuzz/fuzz_checkpoint.o $(BUILD)/fuzz/replay.o
$(BUILD)/tests/test_fuzz_shards: $(BUILD)/fuzz/fuzz_data_shards.o $(BUILD)/fuzz/replay.o
$(BUILD)/tests/test_fuzz_text: $(BUILD)/fuzz/fuzz_data_text.o $(BUILD)/fuzz/replay.o
$(BUILD)/tests/test_fuzz_meta: $(BUILD)/fuzz/fuzz_meta.o $(BUILD)/fuzz/replay.o
$(BUILD)/tests/test_onnx: $(BUILD)/fuzz/fuzz_onnx.o $(BUILD)/fuzz/replay.o
$(BUILD)/tests/test_fuzz_json: $(BUILD)/fuzz/fuzz_json.o $(BUILD)/fuzz/replay.o

# The knobs as this machine resolves them (tools/check_build.sh reads CUDA).
config:
	@echo CUDA=$(CUDA); echo SM=$(SM); echo SAN=$(SAN); echo BLAS_LIB=$(BLAS_LIB); echo PREFIX=$(PREFIX)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TRAIN_LIB_OBJ:.o=.d) $(BUILD)/train/main.d $(TEST_OBJ:.o=.d) \
         $(FUZZ_OBJ:.o=.d) $(BENCH_BIN:=.d) $(EXAMPLE_BIN:=.d)
