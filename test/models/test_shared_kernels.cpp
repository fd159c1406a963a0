// Shared kernel descriptors: a launch that references an immutable descriptor instead of copying
// it queues the same task (same times, same trace) and costs the task record alone.
#include <npurt/collective.hpp>
#include <npurt/models/resnet50.hpp>
#include <npurt/profiler.hpp>
#include <npurt/sim/sim.hpp>
#include <npurt/stream.hpp>
#include <npurt/system.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <mimalloc.h>

namespace {

// Bytes allocated on this thread's heap. The runtime's task records and descriptor copies come
// from mimalloc pools (not operator new), so the footprint is counted where it lands: the used
// blocks of mimalloc's default heap, which this program's malloc and operator new also use.
std::int64_t heap_bytes() {
  std::int64_t total = 0;
  mi_heap_visit_blocks(
      mi_heap_get_default(), false,
      [](const mi_heap_t*, const mi_heap_area_t* area, void*, std::size_t, void* arg) {
        *static_cast<std::int64_t*>(arg) += static_cast<std::int64_t>(area->used * area->block_size);
        return true;
      },
      &total);
  return total;
}

npurt::system timing_only_system(int devices) {
  npurt::sim::sim_options o;
  o.functional = false;
  return npurt::system{npurt::sim::make_backend(npurt::sim::presets::by_name("ascend910", devices), o)};
}

// Two training steps of a small-batch ResNet-50 on `devices` devices, two streams each (the
// second at high priority takes every seventh kernel), with a gradient AllReduce handed over
// between the streams by events: the dispatch queues, events and collectives all take part.
std::string step_trace(int devices, bool shared, std::int64_t& end_ps) {
  const npurt::models::resnet50 model{8};
  npurt::system sys = timing_only_system(devices);
  npurt::profiler prof;
  sys.add_observer(prof);
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> lo, hi;
  for (int d = 0; d < devices; ++d) {
    lo.push_back(sys.device(d).make_stream());
    hi.push_back(sys.device(d).make_stream({npurt::priority::high}));
  }
  const auto& step = model.training_step();
  for (int s = 0; s < 2; ++s)
    for (int d = 0; d < devices; ++d)
      for (std::size_t i = 0; i < step.size(); ++i) {
        auto& st = i % 7 == 3 ? hi[static_cast<std::size_t>(d)] : lo[static_cast<std::size_t>(d)];
        if (shared) (void)st.launch(model.shared_training_step()[i]);
        else (void)st.launch(step[i]);
        if (i != model.forward_kernels()) continue;
        auto grads = sys.device(d).make_event();
        lo[static_cast<std::size_t>(d)].record(grads);
        hi[static_cast<std::size_t>(d)].wait(grads);
        comm.all_reduce(nullptr, nullptr, std::size_t{1} << 16, npurt::dtype::f16, npurt::reduce_op::sum,
                        hi[static_cast<std::size_t>(d)]);
        auto reduced = sys.device(d).make_event();
        hi[static_cast<std::size_t>(d)].record(reduced);
        lo[static_cast<std::size_t>(d)].wait(reduced);
      }
  sys.run();
  end_ps = sys.now().time_since_epoch().count();
  std::ostringstream os;
  prof.write_chrome_trace(os);
  return os.str();
}

}  // namespace

TEST_CASE("launching shared descriptors gives the trace and end time of launching copies",
          "[models][shared_kernel][determinism]") {
  std::int64_t copied_end = 0, shared_end = 0, again_end = 0;
  const std::string copied = step_trace(3, false, copied_end);
  const std::string shared = step_trace(3, true, shared_end);
  const std::string again = step_trace(3, true, again_end);
  CHECK(copied_end > 0);
  CHECK(shared_end == copied_end);
  CHECK(shared == copied);
  CHECK(again == shared);
}

TEST_CASE("a queued task holds one reference to its shared descriptor until it completes", "[models][shared_kernel]") {
  const npurt::models::resnet50 model{8};
  const npurt::shared_kernel& k = model.shared_training_step().front();
  REQUIRE(k.use_count() == 1);
  {
    npurt::system sys = timing_only_system(2);
    auto s0 = sys.device(0).make_stream();
    auto s1 = sys.device(1).make_stream();
    for (int i = 0; i < 5; ++i) {
      (void)s0.launch(k);
      (void)s1.launch(k);
    }
    CHECK(k.use_count() == 11);  // ten queued tasks, none copied the descriptor
    sys.run();
    CHECK(k.use_count() == 1);
  }
  CHECK(k.use_count() == 1);
}

TEST_CASE("a null or invalid shared descriptor fails the launch as a copy of it would",
          "[models][shared_kernel][errors]") {
  npurt::system sys = timing_only_system(1);
  auto s = sys.device(0).make_stream();
  std::error_code ec;
  CHECK_FALSE(s.launch(npurt::shared_kernel{}, ec).valid());
  CHECK(ec == npurt::errc::null_pointer);
  CHECK_THROWS_AS(s.launch(npurt::shared_kernel{}), npurt::caller_error);

  // A 3x3 convolution whose input has 4 channels and whose weight expects 5.
  using npurt::tensor_desc;
  const npurt::kernel_desc bad{
      npurt::kernels::conv2d{tensor_desc{nullptr, npurt::shape{1, 4, 8, 8}, npurt::dtype::f16, npurt::layout::nchw},
                             tensor_desc{nullptr, npurt::shape{4, 5, 3, 3}, npurt::dtype::f16, npurt::layout::nchw},
                             tensor_desc{nullptr, npurt::shape{1, 4, 8, 8}, npurt::dtype::f16, npurt::layout::nchw}}};
  std::error_code copied_ec, shared_ec;
  (void)s.launch(bad, copied_ec);
  (void)s.launch(npurt::make_shared_kernel(bad), shared_ec);
  CHECK(copied_ec);
  CHECK(shared_ec == copied_ec);
  CHECK(s.query());  // nothing was enqueued
}

TEST_CASE("a kernel queued from a shared descriptor costs its task record, not a descriptor copy",
          "[models][shared_kernel][memory]") {
  const npurt::models::resnet50 model{8};
  const auto& step = model.shared_training_step();
  constexpr int devices = 8, steps = 4;
  const auto queued_bytes = [&](bool shared) {
    npurt::system sys = timing_only_system(devices);
    std::vector<npurt::stream> streams;
    for (int d = 0; d < devices; ++d) streams.push_back(sys.device(d).make_stream());
    // Warm-up: the step's names interned, the first chunk of task records made.
    for (const auto& k : model.training_step()) (void)streams.front().launch(k);
    sys.run();
    const std::int64_t before = heap_bytes();
    for (int rep = 0; rep < steps; ++rep)
      for (auto& st : streams)
        for (std::size_t i = 0; i < step.size(); ++i) {
          if (shared) (void)st.launch(step[i]);
          else (void)st.launch(model.training_step()[i]);
        }
    const std::int64_t after = heap_bytes();
    sys.run();
    return static_cast<double>(after - before) / static_cast<double>(steps * devices * step.size());
  };
  const double copied = queued_bytes(false);
  const double shared = queued_bytes(true);
  INFO("heap bytes per queued kernel: copied " << copied << ", shared " << shared << "; sizeof task "
                                               << sizeof(npurt::detail::task) << ", sizeof kernel_desc "
                                               << sizeof(npurt::kernel_desc));
  // A copy carries the whole descriptor; a reference carries none of it, and what is left is the
  // task record (its pool grows in chunks of 4,096) and the device queue's entry: at most 128
  // bytes, the budget that lets a million queued kernels of a cluster-scale run fit in 128 MB.
  CHECK(copied - shared >= static_cast<double>(sizeof(npurt::kernel_desc)) / 2);
  CHECK(shared <= 128);
}
