// Fuzz target: bytes -> parse_checkpoint (training/checkpoint.h), the reader behind
// `trainrt train --resume`.
//
//   build-fz/fuzz/fuzz_checkpoint -max_total_time=60 corpus/checkpoint
//
// First byte even: the rest is the whole file (header, CRC, payload). Odd: the rest
// is the payload and a valid header with its CRC-32 is put in front, so mutations
// reach the protobuf payload and the trainer fields instead of all failing the CRC.
#include <zlib.h>

#include <string>

#include "fuzz/fuzz_util.h"
#include "training/checkpoint.h"

using namespace trainrt;

namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool wrap = data[0] & 1;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string file;
  if (wrap) {
    file = "trainrt-checkpoint\n";
    put_le(file, 1, 4);
    put_le(file, rest.size(), 8);
    put_le(file, ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(rest.data()), rest.size()), 4);
    file += rest;
  } else {
    file = rest;
  }
  return fuzz::expect_clean_error([&] {
    Checkpoint c = parse_checkpoint(file, "fuzz.ckpt");
    (void)c;
  });
}
