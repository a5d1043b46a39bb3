# estream build. One command per target; see README.md "Building".
#   make            release library, CLI           -> build/
#   make SAN=1      ASan+UBSan build of everything -> build-san/
#   make TSAN=1     ThreadSanitizer build          -> build-tsan/
#   make EMU512=0   test programs without the AVX-512 emulation (tests/emu512/, for AVX2 CPUs)
#   make test       build and run the test suite (ends with "N passed, N failed")
#   make bench      build the benchmarks under bench/
#   make fuzz       build the libFuzzer harnesses (clang)  -> build-fuzz/fuzz_*
#   make mutants    plant each bug of tests/mutants.txt in a scratch copy; the suite must fail
#   make debug      -O0 -g -DES_DEBUG            -> build-debug/
#   make install    the CLI, estream.h, libestream.a, libestream.so.MAJOR, estream.pc and the
#                   man page under PREFIX (default /usr/local), DESTDIR staged; make uninstall
#   tools/cross-aarch64.sh   cross-build for AArch64 (CC=aarch64-linux-gnu-gcc BUILD=build-aarch64)
#                            and run the kernel tests under qemu-user

CC       ?= cc
OPT      ?= -O2
MODE_DIR := build
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS   = -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -pthread -MMD -MP -Iinclude -Isrc
LDLIBS   := -lm -pthread

ifeq ($(SAN),1)
  MODE_DIR := build-san
  # -O2, not -O1: the suite runs about twice as fast under ASan+UBSan (test_kern's table
  # comparisons 4.5x), which keeps CI's sanitizer stage short
  OPT    := -O2
  # -fno-var-tracking: the debugger's variable locations took a fifth of this build's compile
  # time; a sanitizer's report needs only the line tables, which stay
  CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
            -fno-var-tracking
  LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(TSAN),1)
  MODE_DIR := build-tsan
  OPT    := -O1
  CFLAGS += -fsanitize=thread -fno-omit-frame-pointer -fno-var-tracking
  LDFLAGS += -fsanitize=thread
endif
# make fuzz's library (clang, libFuzzer's coverage and ASan+UBSan; the harnesses: `fuzz` below)
ifeq ($(FUZZ),1)
  MODE_DIR := build-fuzz
  OPT    := -O1
  FUZZ_CFLAGS = -fsanitize=fuzzer-no-link,address,undefined
  CFLAGS += $(FUZZ_CFLAGS)
  LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(DEBUG),1)
  MODE_DIR := build-debug
  OPT    := -O0
  CFLAGS += -DES_DEBUG
endif

# An explicit BUILD=dir on the command line wins over the mode's default folder.
BUILD ?= $(MODE_DIR)

# liburing, PCRE2 and xxHash are found with pkg-config. Without liburing the loader uses pread.
# A cross build points pkg-config at the target's .pc files (PKG_CONFIG_LIBDIR, or
# PKG_CONFIG=<triplet>-pkg-config); tools/cross-aarch64.sh does.
PKG_CONFIG ?= pkg-config
HAVE_URING := $(shell $(PKG_CONFIG) --exists liburing && echo 1)
ifeq ($(HAVE_URING),1)
  CFLAGS += -DES_HAVE_URING $(shell $(PKG_CONFIG) --cflags liburing)
  LDLIBS += $(shell $(PKG_CONFIG) --libs liburing)
endif
CFLAGS += $(shell $(PKG_CONFIG) --cflags libpcre2-8)
LDLIBS += $(shell $(PKG_CONFIG) --libs libpcre2-8)
# xxHash (XXH3-64): the checksum of each expert record in a pack (src/pack).
CFLAGS += $(shell $(PKG_CONFIG) --cflags libxxhash)
LDLIBS += $(shell $(PKG_CONFIG) --libs libxxhash)
TEST_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
# Jansson: JSON reading and writing for the CLI's JSONL commands (score, embed); the library and
# the tests that only link it do not need it (tools/cross-aarch64.sh builds those without it, so
# pkg-config stays quiet here; a CLI build without libjansson-dev stops at jansson.h).
CLI_CFLAGS := $(shell $(PKG_CONFIG) --cflags jansson 2>/dev/null)
CLI_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson 2>/dev/null || echo -ljansson)

# The target architecture picks the kernel files: x86_*.c (and vec_avx*.c) only for x86-64,
# arm_*.c (and vec_neon.c) only for AArch64; elsewhere only the scalar table is built.
TARGET := $(shell $(CC) -dumpmachine)
ifneq (,$(findstring x86_64,$(TARGET)))
  ARCH_SKIP := src/quant/arm_% src/quant/vec_neon.c
else ifneq (,$(findstring aarch64,$(TARGET)))
  ARCH_SKIP := src/quant/x86_% src/quant/vec_avx% tests/test_emu512.c
else
  ARCH_SKIP := src/quant/x86_% src/quant/vec_avx% src/quant/arm_% src/quant/vec_neon.c \
               tests/test_emu512.c
endif

# The library is everything but its clients: records/ (JSON records), serve/ (the HTTP service)
# and cli/ (the estream tool) are linked into the estream binary only.
APP_DIRS  := src/records src/serve src/cli
LIB_SRC   := $(filter-out $(ARCH_SKIP),$(sort $(shell find src -name '*.c' $(APP_DIRS:%=-not -path '%/*'))))
CLI_SRC   := $(sort $(foreach d,$(APP_DIRS),$(wildcard $(d)/*.c)))
TEST_SRC  := $(filter-out $(ARCH_SKIP),$(sort $(wildcard tests/test_*.c)))
BENCH_SRC := $(sort $(wildcard bench/bench_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# Per-ISA kernel files get their own flags; nothing else is built with them (STYLE §6).
$(BUILD)/src/quant/x86_avx2.o $(BUILD)/src/quant/vec_avx2.o: CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/src/quant/x86_avxvnni.o: CFLAGS += -mavx2 -mfma -mf16c -mavxvnni
AVX512_FLAGS := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
$(BUILD)/src/quant/x86_avx512.o $(BUILD)/src/quant/vec_avx512.o: CFLAGS += $(AVX512_FLAGS)
# The amx table: AVX-512 for decoding and scaling, the AMX tile instructions for the products.
$(BUILD)/src/quant/x86_amx.o: CFLAGS += $(AVX512_FLAGS) -mamx-tile -mamx-int8
# Instrumenting the x86 tables' vector code is most of a sanitized build's compile time
# (x86_avx512.c: 9 s in Release, 76 s under ASan+UBSan, 62 s for the fuzz build). Under ASan its
# locals go without use-after-scope poisoning (half of that; the bug needs a pointer to a local
# kept past its block, and every read of a weight, activation or output buffer keeps its check),
# and the fuzz build leaves the tables plain: no harness runs a product.
ifeq ($(SAN),1)
$(BUILD)/src/quant/x86_%.o: CFLAGS += -fno-sanitize-address-use-after-scope
endif
ifeq ($(FUZZ),1)
$(BUILD)/src/quant/x86_%.o $(BUILD)/src/quant/vec_avx%.o: FUZZ_CFLAGS :=
endif
# AArch64: the rest of the build (arm_asimd.c and vec_neon.c too) stays baseline armv8-a, NEON
# only; dotprod and i8mm only here, and the table is chosen at run time from HWCAP.
$(BUILD)/src/quant/arm_neon.o: CFLAGS += -march=armv8.2-a+dotprod
$(BUILD)/src/quant/arm_i8mm.o: CFLAGS += -march=armv8.2-a+dotprod+i8mm

.PHONY: all lib cli tests bench fuzz test mutants debug clean print-build install uninstall
all: $(BUILD)/estream $(BUILD)/libestream.so
lib: $(BUILD)/libestream.a $(BUILD)/libestream.so

# One set of library objects for both libraries: position-independent, and hidden unless
# include/estream.h declares them ES_API, so the shared library exports the public API only.
$(LIB_OBJ): CFLAGS += -fPIC -fvisibility=hidden

$(BUILD)/libestream.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# libestream.so.MAJOR.MINOR.PATCH, soname libestream.so.MAJOR: the version is include/estream.h's
# ES_VERSION_* (MAJOR changes when the header breaks callers). -z defs: every symbol resolved
# (not under the sanitizers, whose runtime is the executable's).
ES_VERSION := $(shell sed -n 's/^\#define ES_VERSION_[A-Z]* \([0-9][0-9]*\)$$/\1/p' include/estream.h | paste -sd. -)
ES_MAJOR   := $(firstword $(subst ., ,$(ES_VERSION)))
SO_NAME    := libestream.so.$(ES_MAJOR)
SO_LDFLAGS := -shared -Wl,-soname,$(SO_NAME)
ifeq ($(SAN)$(TSAN),)
  SO_LDFLAGS += -Wl,-z,defs
endif
$(BUILD)/libestream.so.$(ES_VERSION): $(LIB_OBJ)
	$(CC) $(SO_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/libestream.so: $(BUILD)/libestream.so.$(ES_VERSION)
	ln -sf libestream.so.$(ES_VERSION) $(BUILD)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

# The man page: estream --help and every command's --help (tools/make-man.sh).
$(BUILD)/estream.1: $(BUILD)/estream tools/make-man.sh
	bash tools/make-man.sh $(BUILD)/estream $(ES_VERSION) > $@.tmp && mv $@.tmp $@

$(BUILD)/estream: $(CLI_OBJ) $(BUILD)/libestream.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CLI_LDLIBS)
$(CLI_OBJ): CFLAGS += $(CLI_CFLAGS)
# test_score reads the CLI's JSONL outputs with jansson too.
$(BUILD)/tests/test_score: CFLAGS += $(CLI_CFLAGS)
$(BUILD)/tests/test_score: TEST_LDLIBS += $(CLI_LDLIBS)
$(BUILD)/tests/test_serve: CFLAGS += $(CLI_CFLAGS)
$(BUILD)/tests/test_serve: TEST_LDLIBS += $(CLI_LDLIBS)
# test_chat and tools/chat_render read the chat golden data (JSON) with jansson too.
$(BUILD)/tests/test_chat: CFLAGS += $(CLI_CFLAGS)
$(BUILD)/tests/test_chat: TEST_LDLIBS += $(CLI_LDLIBS)
$(BUILD)/tools/chat_render: CFLAGS += $(CLI_CFLAGS)
$(BUILD)/tools/chat_render: LDLIBS += $(CLI_LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c tests/t.h $(BUILD)/libestream.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(TEST_OBJ) $(BUILD)/libestream.a $(LDFLAGS) $(LDLIBS) \
	    $(TEST_LDLIBS)

# The amx table a second time, on a C emulation of the tile instructions (quant/amx_ops.h), with
# no AMX flags so that it cannot contain one: an object only these test programs link. It
# registers itself before main, so that they run the amx table by name (es_kern_get("amx"),
# kernels = "amx") on any AVX-512 CPU, bit for bit against the other tables; where the CPU has
# AMX they run the real one (and without AVX-512, the build below). The library, the CLI and
# the benchmarks never contain it.
ifneq (,$(findstring x86_64,$(TARGET)))
AMX_EMU_OBJ   := $(BUILD)/tests/x86_amx_emu.o
AMX_EMU_TESTS := $(BUILD)/tests/test_kern $(BUILD)/tests/test_tiles $(BUILD)/tests/test_forward \
                 $(BUILD)/tests/test_batch $(BUILD)/tests/test_plan
$(AMX_EMU_OBJ): src/quant/x86_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) $(if $(filter 1,$(SAN)),-fno-sanitize-address-use-after-scope) \
	    -DES_AMX_EMULATE -c -o $@ $<
$(AMX_EMU_TESTS): $(AMX_EMU_OBJ)
$(AMX_EMU_TESTS): TEST_OBJ += $(AMX_EMU_OBJ)
-include $(AMX_EMU_OBJ:.o=.d)

# The avx512 and amx tables once more, on AVX2 alone: quant/avx512_emu.h (SIMDe, libsimde-dev)
# stands in for the AVX-512 instructions, amx_ops.h's emulation for the tiles. x86_amx.c's build
# registers the three fills before main, and the dispatcher offers "avx512" and "amx" by name
# on a CPU without AVX-512 (an AMD Zen 2/3), so the same tests compare those tables bit for bit
# there too. Test programs only, as above; test_vec runs the avx512 table's vector steps. -O1:
# at -O2 the avx512 table's micro-kernels on SIMDe took over two minutes to compile, -O1 one.
# EMU512=0 leaves them out of the test programs (tools/mutants.sh, for bugs that are not in those
# tables: a bug in kern.h would otherwise rebuild them, a minute or more each).
EMU512 ?= 1
EMU512_OBJ := $(BUILD)/tests/emu512/x86_avx512.o $(BUILD)/tests/emu512/vec_avx512.o \
              $(BUILD)/tests/emu512/x86_amx.o
# The sanitizer builds: SIMDe's lane-by-lane bodies under ASan+UBSan took 8 minutes to compile
# (x86_avx512.c; 3 for x86_amx.c), so the avx512 table's two files are built without
# sanitizers (their code is sanitized natively on AVX-512 CPUs) and x86_amx.c, whose driver keeps
# the per-thread tile state and the scratch the decoded tiles are written to, with ASan (or TSan)
# alone: UBSan's checks doubled its compile time, and SIMDe's lanes wrap as x86 ones do, which
# UBSan would report as signed overflow.
EMU512_CFLAGS = $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(CFLAGS)) -O1 -fno-var-tracking \
                -mavx2 -mfma -mf16c -Wno-psabi -DES_AVX512_EMULATE -DES_AMX_EMULATE \
                -include quant/avx512_emu.h
EMU512_SANITIZE := $(if $(filter 1,$(SAN)),-fsanitize=address -fno-sanitize-address-use-after-scope) \
                   $(if $(filter 1,$(TSAN)),-fsanitize=thread)
$(EMU512_OBJ): $(BUILD)/tests/emu512/%.o: src/quant/%.c
	@mkdir -p $(dir $@)
	$(CC) $(EMU512_CFLAGS) $(if $(filter %/x86_amx.o,$@),$(EMU512_SANITIZE)) -c -o $@ $<
ifeq ($(EMU512),1)
$(AMX_EMU_TESTS) $(BUILD)/tests/test_vec: $(EMU512_OBJ)
$(AMX_EMU_TESTS) $(BUILD)/tests/test_vec: TEST_OBJ += $(EMU512_OBJ)
endif
# test_emu512 holds avx512_emu.h to the instructions' definitions: compiled as that build is
# (private: not passed on to the library's objects, which make may build on its way).
# Under UBSan: SIMDe computes some lanes' wrapping x86 arithmetic in C's signed types.
EMU512_WRAP := -fno-sanitize=signed-integer-overflow,shift
$(BUILD)/tests/test_emu512: private CFLAGS += -mavx2 -mfma -mf16c -Wno-psabi \
    -include quant/avx512_emu.h $(if $(filter 1,$(SAN)),$(EMU512_WRAP))
-include $(EMU512_OBJ:.o=.d)
endif

$(BUILD)/bench/%: bench/%.c $(BUILD)/libestream.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BENCH_OBJ) $(BUILD)/libestream.a $(LDFLAGS) $(LDLIBS)

# bench_amx_bound times the amx table without its matrix unit (quant/amx_ops.h, ES_AMX_NO_TMUL)
# on AVX-512 CPUs whose AMX cannot run: a third build of x86_amx.c, linked into it alone.
ifneq (,$(findstring x86_64,$(TARGET)))
AMX_NOTMUL_OBJ := $(BUILD)/bench/x86_amx_notmul.o
$(AMX_NOTMUL_OBJ): src/quant/x86_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -DES_AMX_NO_TMUL -c -o $@ $<
$(BUILD)/bench/bench_amx_bound: $(AMX_NOTMUL_OBJ)
$(BUILD)/bench/bench_amx_bound: BENCH_OBJ += $(AMX_NOTMUL_OBJ)
-include $(AMX_NOTMUL_OBJ:.o=.d)
endif

# Small helpers under tools/ (fixture and seed makers), e.g. build/tools/gguf_seeds.
$(BUILD)/tools/%: tools/%.c $(BUILD)/libestream.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libestream.a $(LDFLAGS) $(LDLIBS)

# test_plan counts the library's allocations through these wrappers (invoke must not allocate).
$(BUILD)/tests/test_plan: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=mmap
# test_oom fails the N-th allocation through these wrappers.
$(BUILD)/tests/test_oom: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=strdup,--wrap=strndup
# test_trace makes every allocation fail for a while (recording must drop events, not crash).
$(BUILD)/tests/test_trace: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc

tests: $(TEST_BIN) $(BUILD)/estream
bench: $(BENCH_BIN) $(BUILD)/estream

test: tests
	bash tests/run.sh $(BUILD)

# The build folder of this mode (tools/test-all.sh asks for it).
print-build:
	@echo $(BUILD)

mutants:
	bash tools/mutants.sh

# libFuzzer harnesses (clang): fuzz_gguf (the GGUF reader), fuzz_model (es_model_open on whole
# files, with a metadata-level mutator), fuzz_tok (every pre-tokenizer and SentencePiece on
# arbitrary text), fuzz_chat (arbitrary chat templates rendered with a fixed conversation),
# fuzz_cgroup (the /proc and /sys files that size the threads and the memory) and
# fuzz_serve (the HTTP service's request bodies, below). Run one with
# (new inputs go to the first folder):
#   mkdir -p build-fuzz/corpus && build-fuzz/fuzz_gguf -max_total_time=60 \
#       -dict=tests/fuzz/gguf.dict build-fuzz/corpus tests/fuzz/corpus
# tools/test-all.sh runs each for ESTREAM_FUZZ_SECONDS (30 s by default).
FUZZ_TARGETS := fuzz_gguf fuzz_model fuzz_tok fuzz_chat fuzz_cgroup
# fuzz_serve: estream serve's request parsers and replies, and the records they build (no HTTP)
FUZZ_SERVE_SRC := $(wildcard src/records/*.c) $(wildcard src/serve/api*.c) src/serve/exec.c \
                  src/serve/metrics.c src/serve/http1.c src/serve/jmem.c
fuzz:
	$(MAKE) FUZZ=1 CC=clang build-fuzz/libestream.a
	for t in $(FUZZ_TARGETS); do \
	    clang -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
	        -o build-fuzz/$$t tests/fuzz/$$t.c build-fuzz/libestream.a $(LDLIBS) || exit 1; \
	done
	clang -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc $(CLI_CFLAGS) \
	    -o build-fuzz/fuzz_serve tests/fuzz/fuzz_serve.c $(FUZZ_SERVE_SRC) build-fuzz/libestream.a \
	    $(LDLIBS) $(CLI_LDLIBS)

debug:
	$(MAKE) DEBUG=1

# Install (GNU conventions: PREFIX, DESTDIR, BINDIR, LIBDIR, INCLUDEDIR, MANDIR). estream.pc
# says where they went; static linking (pkg-config --static) adds the libraries estream uses.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
PC_REQUIRES := $(if $(HAVE_URING),liburing )libpcre2-8 libxxhash
install: $(BUILD)/estream $(BUILD)/libestream.a $(BUILD)/libestream.so $(BUILD)/estream.1
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) \
	    $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(BUILD)/estream $(DESTDIR)$(BINDIR)/estream
	install -m 644 include/estream.h $(DESTDIR)$(INCLUDEDIR)/estream.h
	install -m 644 $(BUILD)/libestream.a $(DESTDIR)$(LIBDIR)/libestream.a
	install -m 755 $(BUILD)/libestream.so.$(ES_VERSION) $(DESTDIR)$(LIBDIR)/libestream.so.$(ES_VERSION)
	ln -sf libestream.so.$(ES_VERSION) $(DESTDIR)$(LIBDIR)/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(LIBDIR)/libestream.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(ES_VERSION)|; s|@REQUIRES@|$(PC_REQUIRES)|' \
	    estream.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/estream.pc
	install -m 644 $(BUILD)/estream.1 $(DESTDIR)$(MANDIR)/man1/estream.1
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/estream $(DESTDIR)$(INCLUDEDIR)/estream.h \
	    $(DESTDIR)$(LIBDIR)/libestream.a $(DESTDIR)$(LIBDIR)/libestream.so.$(ES_VERSION) \
	    $(DESTDIR)$(LIBDIR)/$(SO_NAME) $(DESTDIR)$(LIBDIR)/libestream.so \
	    $(DESTDIR)$(LIBDIR)/pkgconfig/estream.pc $(DESTDIR)$(MANDIR)/man1/estream.1

clean:
	rm -rf build build-san build-tsan build-debug build-fuzz build-aarch64

# the test programs' too: a header only they include (tests/t.h, quant/avx512_emu.h for
# test_emu512) rebuilds them
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d)
