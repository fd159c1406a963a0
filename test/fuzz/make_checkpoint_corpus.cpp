// Writes the seed corpus of fuzz_checkpoint: small valid checkpoints covering every dtype, the
// metadata kinds, scalars, empty tensors and rank 8, plus a few broken files.
// Usage: make_checkpoint_corpus DIR
#include <npurt/checkpoint.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

void write(const std::string& dir, const std::string& name, const std::vector<std::byte>& b) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<std::byte> ramp(std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = std::byte(static_cast<std::uint8_t>(i * 37 + 1));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using npurt::dtype;
  write(dir, "empty.ckpt", npurt::checkpoint{}.serialize());
  {
    npurt::checkpoint c;
    c.set_metadata("epoch", 3);
    c.set_metadata("lr", 0.001);
    c.set_metadata("model", "resnet50");
    c.set_metadata("step", -7);
    write(dir, "metadata.ckpt", c.serialize());
  }
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8}) {
    npurt::checkpoint c;
    c.add_tensor("t", t, {2, 3}, ramp(6 * npurt::size_of(t)));
    write(dir, "dtype-" + std::string(npurt::to_string(t)) + ".ckpt", c.serialize());
  }
  {
    npurt::checkpoint c;
    c.set_metadata("step", 100);
    c.add_tensor("scalar", dtype::f32, {}, ramp(4));
    c.add_tensor("empty", dtype::i32, {3, 0}, ramp(0));
    c.add_tensor("rank8", dtype::u8, {1, 2, 1, 2, 1, 2, 1, 2}, ramp(16));
    c.add_tensor("layer.0.weight", dtype::bf16, {4, 4}, ramp(32));
    const auto b = c.serialize();
    write(dir, "mixed.ckpt", b);
    write(dir, "broken-truncated.ckpt", std::vector<std::byte>(b.begin(), b.end() - 5));
    auto flipped = b;
    flipped[100] ^= std::byte{0x40};
    write(dir, "broken-flipped.ckpt", flipped);
  }
  return 0;
}
