// profile_timeline — profile a small pipelined program and look at it.
//
// Three streams on one simulated Ascend 910 overlap the upload of micro-batch i+1, the compute of
// micro-batch i (a small MLP) and the download of micro-batch i-1; events carry the dependencies.
// The system's profiler records the run; the program then writes
//   trace.json    Chrome trace: open it in ui.perfetto.dev or chrome://tracing
//   timeline.svg  the same run as a picture, drawn by npurt itself
// and prints the summary (busy time, overlap, idle gaps and why, the critical path).
//
//   profile_timeline [TRACE.json [TIMELINE.svg]]
//
// Any npurt program can be profiled without code changes: NPURT_TRACE=trace.json ./program
#include <npurt/npurt.hpp>
#include <npurt/profiler.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

int main(int argc, char** argv) {
  if (argc > 3 || (argc > 1 && argv[1][0] == '-')) {
    std::fprintf(stderr, "usage: profile_timeline [TRACE.json [TIMELINE.svg]]\n");
    return 1;
  }
  const std::string trace_path = argc > 1 ? argv[1] : "trace.json";
  const std::string svg_path = argc > 2 ? argv[2] : "timeline.svg";

  // Timing only: shapes without data, so the run takes milliseconds of wall time.
  npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::ascend910(1), {.functional = false})};
  npurt::profiler& prof = sys.profiler();
  npurt::device& dev = sys.device(0);

  npurt::stream upload = dev.make_stream();
  npurt::stream compute = dev.make_stream({.priority = npurt::priority::high});
  // Each priority level of a device feeds one execution queue in submission order (shared_fifo,
  // as on the real device): a download waiting for its batch's compute would hold the next
  // upload behind it if both streams shared a level.
  npurt::stream download = dev.make_stream({.priority = npurt::priority::low});

  // A 3-layer MLP on micro-batches of 512 rows: each layer a [512,4096] x [4096,4096] matmul
  // and a gelu. The weights are assumed resident; only activations cross PCIe.
  constexpr int batches = 4, layers = 3;
  constexpr std::int64_t rows = 512, width = 4096;
  const auto f16 = npurt::dtype::f16;
  const std::size_t act_bytes = rows * width * 2, w_bytes = width * width * 2;
  void* host_in = sys.host_malloc(act_bytes * batches);
  void* host_out = sys.host_malloc(act_bytes * batches);
  std::vector<void*> w(layers), x(batches), t(batches);
  for (auto& p : w) p = dev.malloc(w_bytes);
  for (int i = 0; i < batches; ++i) {
    x[i] = dev.malloc(act_bytes);
    t[i] = dev.malloc(act_bytes);
  }

  std::vector<npurt::event> uploaded, computed;
  for (int i = 0; i < batches; ++i) {
    uploaded.push_back(dev.make_event());
    computed.push_back(dev.make_event());
  }
  prof.push_range("enqueue");
  for (int i = 0; i < batches; ++i) {
    prof.mark("batch " + std::to_string(i));
    auto* in = static_cast<std::byte*>(host_in) + act_bytes * i;
    auto* out = static_cast<std::byte*>(host_out) + act_bytes * i;
    upload.memcpy(x[i], act_bytes, in, act_bytes, npurt::memcpy_kind::host_to_device);
    upload.record(uploaded[i]);

    compute.wait(uploaded[i]);
    for (int l = 0; l < layers; ++l) {
      const npurt::tensor_desc xi{x[i], {rows, width}, f16}, ti{t[i], {rows, width}, f16};
      compute.launch({npurt::kernels::matmul{xi, {w[l], {width, width}, f16}, ti}, "matmul"});
      compute.launch({npurt::kernels::elementwise{npurt::kernels::eltwise_fn::gelu, ti, {}, xi}, "gelu"});
    }
    compute.record(computed[i]);

    download.wait(computed[i]);
    download.memcpy(out, act_bytes, x[i], act_bytes, npurt::memcpy_kind::device_to_host);
  }
  prof.pop_range();
  sys.run();
  // What the three streams are for: each upload after the first ends while the previous batch
  // is still computing.
  for (int i = 0; i + 1 < batches; ++i)
    if (npurt::elapsed_time(uploaded[i + 1], computed[i]) <= 0) {
      std::fprintf(stderr, "profile_timeline: the upload of batch %d did not overlap the compute of batch %d\n", i + 1,
                   i);
      return 1;
    }

  for (int i = 0; i < batches; ++i) {
    dev.free(x[i]);
    dev.free(t[i]);
  }
  for (auto* p : w) dev.free(p);
  sys.host_free(host_in);
  sys.host_free(host_out);

  std::error_code ec;
  prof.write_chrome_trace(trace_path, ec);
  if (ec) {
    std::fprintf(stderr, "cannot write %s: %s\n", trace_path.c_str(), ec.message().c_str());
    return 1;
  }
  npurt::svg_options opts;
  opts.title = "npurt: upload / compute / download pipeline on one Ascend 910 (4 micro-batches)";
  opts.width = 1100;
  std::ofstream svg(svg_path, std::ios::binary);
  prof.write_svg(svg, opts);
  svg.close();
  if (!svg) {
    std::fprintf(stderr, "cannot write %s\n", svg_path.c_str());
    return 1;
  }
  prof.write_summary_text(std::cout);
  std::printf("\nwrote %s (open in ui.perfetto.dev) and %s\n", trace_path.c_str(), svg_path.c_str());
  return 0;
}
