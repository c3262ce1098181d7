// One kernel table per ISA path, chosen at load from what the CPU reports (or RAG_KERNEL_ISA),
// switchable at run time so tests can compare every path with the scalar reference.
#include <atomic>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <string>
#include <vector>

#include "common.h"

namespace ragk {

float g_half_table[65536];

namespace {

struct Registry {
  std::vector<IsaTable> tables;  // supported paths, scalar first, best last
  std::string csv;
  std::atomic<const IsaTable*> active{nullptr};

  Registry() {
    for (uint32_t i = 0; i < 65536; ++i) g_half_table[i] = half_to_float_bits(uint16_t(i));
    IsaTable t{};
    fill_scalar(t);
    t.name = "scalar";
    tables.push_back(t);
    // each path starts from the one below it (entries it does not fill keep that path's)
    auto add = [this](void (*fill)(IsaTable&), const char* name) {
      IsaTable x = tables.back();
      fill(x);
      x.name = name;
      tables.push_back(x);
    };
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      add(fill_avx2, "avx2");
#if RAGK_HAVE_AVXVNNI
      if (cpu_has_avxvnni()) add(fill_avxvnni, "avxvnni");
#endif
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
        add(fill_avx512, "avx512");
#if RAGK_HAVE_AMX
        if (amx_ready()) add(fill_amx, "amx");
#endif
      }
    }
#endif
#if defined(__aarch64__)
    add(fill_neon, "neon");
#endif
    for (size_t i = 0; i < tables.size(); ++i) {
      if (i) csv += ",";
      csv += tables[i].name;
    }
    const IsaTable* pick = &tables.back();
    if (const char* env = std::getenv("RAG_KERNEL_ISA")) {
      for (const auto& tb : tables)
        if (std::string(env) == tb.name) pick = &tb;
    }
    active.store(pick);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

#if RAGK_HAVE_AVXVNNI
bool cpu_has_avxvnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a >> 4) & 1u;  // the OS saves YMM state: implied by the AVX2 check before it
}
#endif

const IsaTable& active_table() { return *registry().active.load(std::memory_order_acquire); }

const char* active_isa() { return active_table().name; }

bool select_isa(const char* name) {
  Registry& r = registry();
  if (name == nullptr || name[0] == '\0') {
    r.active.store(&r.tables.back());
    return true;
  }
  for (const auto& tb : r.tables) {
    if (std::string(name) == tb.name) {
      r.active.store(&tb);
      return true;
    }
  }
  return false;
}

const char* supported_isas_csv() { return registry().csv.c_str(); }

namespace {
std::atomic<int64_t> g_xblock_kb{[] {
  const char* env = std::getenv("RAG_GEMM_XBLOCK_KB");
  const int64_t v = env ? int64_t(std::atoll(env)) : 2048;
  return v > 0 ? v : int64_t(2048);
}()};

std::atomic<int64_t> g_prefetch{[] {
  const char* env = std::getenv("RAG_PREFETCH");
  return env ? int64_t(std::atoll(env)) : int64_t(4096);
}()};
std::atomic<int64_t> g_row_task_macs{[] {
  const char* env = std::getenv("RAG_ROW_TASK_KMACS");
  const int64_t v = env ? int64_t(std::atoll(env)) * 1024 : int64_t(1) << 18;
  return v > 0 ? v : int64_t(1) << 18;
}()};
}  // namespace

int64_t row_task_macs() { return g_row_task_macs.load(std::memory_order_relaxed); }

int64_t set_row_task_macs(int64_t macs) { return g_row_task_macs.exchange(macs > 0 ? macs : int64_t(1) << 18); }

int64_t prefetch_bytes() { return g_prefetch.load(std::memory_order_relaxed); }

int64_t set_prefetch_bytes(int64_t bytes) { return g_prefetch.exchange(bytes); }

int64_t gemm_xblock_kb() { return g_xblock_kb.load(std::memory_order_relaxed); }

int64_t set_gemm_xblock_kb(int64_t kb) { return g_xblock_kb.exchange(kb > 0 ? kb : 2048); }

}  // namespace ragk
