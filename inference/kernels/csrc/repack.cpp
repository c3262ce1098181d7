// Q4_K rows interleaved by 8 (the "x8" layout, common.h): a byte permutation of 8 plain rows, so
// packing and unpacking are exact and the group has the same size as the rows it holds.
#include <cstring>

#include "common.h"

namespace ragk {

void q4k_x8_pack(const uint8_t* src, int64_t rb, int64_t nsb, uint8_t* dst) {
  for (int64_t i = 0; i < nsb; ++i) {
    uint8_t* o = dst + i * X8_SB_BYTES;
    for (int r = 0; r < X8_ROWS; ++r) {
      const uint8_t* b = src + r * rb + i * 144;
      std::memcpy(o + X8_D + 2 * r, b, 2);
      std::memcpy(o + X8_DMIN + 2 * r, b + 2, 2);
      std::memcpy(o + X8_A + 4 * r, b + 4, 4);
      std::memcpy(o + X8_B + 4 * r, b + 8, 4);
      std::memcpy(o + X8_C + 4 * r, b + 12, 4);
      for (int p = 0; p < 4; ++p)
        for (int t = 0; t < 8; ++t) std::memcpy(o + X8_QS + (p * 8 + t) * 32 + 4 * r, b + 16 + 32 * p + 4 * t, 4);
    }
  }
}

void q4k_x8_unpack_row(const uint8_t* grp, int64_t nsb, int r, uint8_t* dst) {
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* o = grp + i * X8_SB_BYTES;
    uint8_t* b = dst + i * 144;
    x8_row_header(o, r, b);
    for (int p = 0; p < 4; ++p)
      for (int t = 0; t < 8; ++t) std::memcpy(b + 16 + 32 * p + 4 * t, o + X8_QS + (p * 8 + t) * 32 + 4 * r, 4);
  }
}

}  // namespace ragk
