// A program outside the tree that includes ONNX's generated protobuf headers beside npurt's,
// built with nothing but `pkg-config --cflags --libs npurt`: when npurt was built with ONNX
// import, npurt.pc carries the defines those headers need (onnx_pb.h picks its generated header
// by ONNX_ML, and Debian ships only the ML one).
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <onnx/onnx_pb.h>

#include <cstdio>

int main() {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  auto done = s.launch(npurt::kernels::fixed{npurt::picoseconds{1'000'000}});
  done.synchronize();
  // ONNX_NAMESPACE=onnx: the generated classes are in ::onnx.
  constexpr int f32 = onnx::TensorProto_DataType_FLOAT;
  std::printf("onnx consumer: FLOAT is data type %d\n", f32);
  return done.query() && f32 == 1 ? 0 : 1;
}
