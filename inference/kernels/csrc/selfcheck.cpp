// Standalone check without torch, for paths the x86 test machines cannot run (NEON): every
// supported path's dot product vs the scalar one on random blocks with sane scales. Not part of
// the library. On x86 for aarch64 (zig from the ziglang wheel, qemu-user from Debian):
//   zig c++ -target aarch64-linux-musl -static -std=c++17 -O2 -ffp-contract=off -I. \
//       selfcheck.cpp scalar.cpp neon.cpp dispatch.cpp dequant.cpp -o selfcheck && qemu-aarch64 ./selfcheck
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "common.h"
using namespace ragk;
int main() {
  std::mt19937 rng(1);
  const int types[] = {T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_Q4_K, T_Q5_K, T_Q6_K};
  int bad = 0;
  select_isa("");
  std::printf("supported=%s active=%s\n", supported_isas_csv(), active_isa());
  for (int t : types) {
    const int be = block_elems(t), bb = block_bytes(t);
    for (int nb = 1; nb <= 4; ++nb) {
      const int k = be * nb;
      std::vector<uint8_t> w(size_t(bb) * nb);
      for (auto& v : w) v = uint8_t(rng());
      // sane fp16 scales: 0x1C00..0x1FFF ~ 0.004..0.008 with random sign
      std::vector<int> offs;
      if (t == T_Q6_K) offs = {208}; else offs = {0};
      if (t == T_Q4_1 || t == T_Q5_1 || t == T_Q4_K || t == T_Q5_K) offs.push_back(2);
      for (int b = 0; b < nb; ++b)
        for (int o : offs) {
          uint16_t h = uint16_t(0x1C00 | (rng() & 0x3FF) | ((rng() & 1) << 15));
          std::memcpy(&w[size_t(b) * bb + o], &h, 2);
        }
      std::vector<float> x(k);
      std::normal_distribution<float> nd;
      for (auto& v : x) v = nd(rng);
      float ref = 0.0f;
      std::string names = supported_isas_csv();
      size_t pos = 0;
      while (pos <= names.size()) {
        size_t end = names.find(',', pos);
        if (end == std::string::npos) end = names.size();
        const std::string isa = names.substr(pos, end - pos);
        pos = end + 1;
        select_isa(isa.c_str());
        const IsaTable& tb = active_table();
        std::vector<uint8_t> xq(x_row_bytes(t, k));
        (x_kind(t) == X_Q32 ? tb.quant32 : tb.quant256)(x.data(), xq.data(), k);
        const float r = tb.dot[t](k, w.data(), xq.data());
        if (isa == "scalar") ref = r;
        const float err = std::fabs(r - ref) / std::fmax(std::fabs(ref), 1e-6f);
        if (err > 1e-5f) {
          ++bad;
          std::printf("MISMATCH %s type %d k %d: scalar %g, %s %g\n", isa.c_str(), t, k, ref, isa.c_str(), r);
        }
      }
    }
  }
  std::printf("%s (%d mismatches)\n", bad ? "FAIL" : "OK", bad);
  return bad != 0;
}
