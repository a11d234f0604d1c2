// Timing: the visible cases' timed calls, reference and candidate interleaved, checked at
// secret calls (docs/runner.md, "Timing").
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device_values.hpp"
#include "runner/child/job_runner.hpp"
#include "runner/child/step_failure.hpp"
#include "runner/judge/timing_stats.hpp"
#include "tasks/generators.hpp"
#include "tasks/roofline.hpp"

namespace crucible::runner::child {

using core::StepStatus;

namespace {

struct Slot {
  std::vector<DeviceBuffer> tensors;
  std::vector<DeviceBuffer> reference_ws;
  std::vector<DeviceBuffer> candidate_ws;
  std::vector<CUdeviceptr> tensor_ptrs, reference_ws_ptrs, candidate_ws_ptrs;
};

}  // namespace

Value JobRunner::time_case(const CaseSetup& setup) {
  const auto setup_started = Clock::now();
  const auto& c = *setup.c;
  const CUstream stream = device_.stream;
  const std::size_t n = task_.tensors.size();
  std::size_t slot_bytes = 0;
  for (const auto b : setup.bytes) slot_bytes += b;
  for (const auto b : setup.reference.workspace_bytes) slot_bytes += b;
  for (const auto b : setup.candidate.workspace_bytes) slot_bytes += b;
  const std::size_t budget = std::size_t{4} << 30;
  const std::size_t slots_count =
      std::clamp<std::size_t>(budget / std::max<std::size_t>(slot_bytes, 1), 2, 8);

  // Value pools: each input's values for call i are a window of its pool starting at a
  // different offset, so every timed call sees values no earlier call saw. A stream of
  // bounded length (a permutation: distinct slots or block ids) extends only as far as it
  // goes (no further at all when the case uses every value).
  constexpr std::size_t kPoolExtra = 1u << 14;  // distinct windows
  constexpr std::size_t kStride = 977;          // prime, coprime to kPoolExtra + 1 = 5 * 29 * 113
  std::vector<DeviceBuffer> pools(n);
  std::vector<DeviceBuffer> poison(n);
  std::vector<std::size_t> pool_extra(n, 0);
  std::vector<HostValueCache::Bytes> uploaded(n);  // host copies alive until the uploads end
  for (std::size_t t = 0; t < n; ++t) {
    const auto& tensor = task_.tensors[t];
    if (tasks::is_input(tensor.role)) {
      const std::uint64_t seed = tasks::tensor_seed(setup.seed, tensor.name, 2);
      const auto& spec = c.values.at(tensor.name);
      pool_extra[t] = kPoolExtra;
      if (const auto length = tasks::stream_length(spec)) {
        const std::uint64_t used = setup.counts[t];
        pool_extra[t] = std::min<std::size_t>(kPoolExtra, *length > used ? *length - used : 0);
      }
      const std::size_t count = setup.counts[t] + pool_extra[t];
      pools[t] = DeviceBuffer(count * core::dtype_size(tensor.dtype), false);
      uploaded[t] = fill_input(c, tensor, seed, count, pools[t].data());
    } else {
      poison[t] = DeviceBuffer(setup.bytes[t], false);
      poison_device(poison[t].data(), tensor.dtype, setup.counts[t], 0);
    }
  }
  check(cuStreamSynchronize(stream), "pool upload");
  std::vector<Slot> slots(slots_count);
  for (auto& slot : slots) {
    for (std::size_t t = 0; t < n; ++t) {
      slot.tensors.emplace_back(setup.bytes[t], false);
      slot.tensor_ptrs.push_back(slot.tensors.back().data());
    }
    for (const auto b : setup.reference.workspace_bytes) {
      slot.reference_ws.emplace_back(b, false);
      slot.reference_ws_ptrs.push_back(slot.reference_ws.back().data());
    }
    for (const auto b : setup.candidate.workspace_bytes) {
      slot.candidate_ws.emplace_back(b, false);
      slot.candidate_ws_ptrs.push_back(slot.candidate_ws.back().data());
      // Fresh device memory may hold an earlier job's data: workspaces start as junk.
      check(cuMemsetD8Async(slot.candidate_ws.back().data(), 0xA5, b, stream), "workspace fill");
    }
  }
  auto prepare_call = [&](const Slot& slot, std::size_t call) {
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      const std::size_t esize = core::dtype_size(tensor.dtype);
      const std::size_t offset = (call * kStride) % (pool_extra[t] + 1);
      const CUdeviceptr source =
          tasks::is_input(tensor.role) ? pools[t].data() + offset * esize : poison[t].data();
      if (setup.bytes[t] > 0) {
        check(cuMemcpyDtoDAsync(slot.tensor_ptrs[t], source, setup.bytes[t], stream), "refresh");
      }
    }
    device_.flush_l2(static_cast<std::uint32_t>(call));
  };

  std::mt19937_64 chooser(mix(job_.secret, setup.index));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  bool first_candidate_call = true;

  const Side reference = reference_side();
  const Side candidate{&job_.candidate_plan.plan, candidate_module_.get(), true};
  const std::size_t candidate_launches = setup.candidate.launches.size();
  const std::size_t reference_launches = library_ != nullptr
                                             ? library_->kernels_per_call(setup.index)
                                             : setup.reference.launches.size();

  struct Pending {
    bool is_candidate;
    bool warmup;
  };
  std::map<std::uint64_t, Pending> pending;
  std::vector<double> reference_ns, candidate_ns;
  std::size_t checked = 0, incomplete = 0, call = 0;
  const auto started = Clock::now();
  const auto cap = std::chrono::duration<double, std::milli>(job_.timing.time_cap_ms);
  const std::size_t warmup = job_.timing.warmup_calls;
  StoppingRule rule;
  rule.target_rel_halfwidth = job_.timing.target_rel_ci;
  rule.min_samples = job_.timing.min_samples;
  rule.max_samples = job_.timing.max_samples;
  const auto order = interleaved_order(job_.timing.max_samples + warmup);
  // Checked calls: the candidate's outputs kept aside and the device check's verdicts (three
  // u64 per tensor); host copies are pinned only when a check fails.
  std::vector<DeviceBuffer> kept(n);
  for (std::size_t t = 0; t < n; ++t) {
    if (tasks::is_output(task_.tensors[t].role)) kept[t] = DeviceBuffer(setup.bytes[t], false);
  }
  DeviceBuffer check_results(24 * n, false);
  std::byte* check_host = device_.staging("check results", 24 * n);
  record_phase("timing setup " + c.name, setup_started);

  auto collect = [&] {
    // 32 calls of both kernels may be in flight.
    sync_or_fail(stream, true, "in timed calls of case " + c.name, 64 * job_.kernel_timeout_ms);
    for (const auto& [tag, span] : timer_.collect()) {
      const auto it = pending.find(tag);
      if (it == pending.end()) continue;
      const std::size_t expected_kernels =
          it->second.is_candidate ? candidate_launches : reference_launches;
      if (span.operations() != expected_kernels) {
        ++incomplete;
      } else if (!it->second.warmup) {
        (it->second.is_candidate ? candidate_ns : reference_ns).push_back(span.duration_ns());
      }
      pending.erase(it);
    }
  };

  for (std::size_t i = 0; i < order.size(); ++i) {
    const bool is_candidate = order[i] == 1;
    const bool is_warmup = i < 2 * warmup;
    const Slot& slot = slots[call % slots.size()];
    const std::size_t this_call = call++;
    prepare_call(slot, this_call);
    const std::uint64_t tag = next_tag_++;
    pending[tag] = Pending{is_candidate, is_warmup};
    {
      const TagScope scope(timer_, tag);
      launch(is_candidate ? candidate : reference, is_candidate ? setup.candidate : setup.reference,
             setup, slot.tensor_ptrs,
             is_candidate ? slot.candidate_ws_ptrs : slot.reference_ws_ptrs);
    }
    // The first timed call, then a share drawn from the secret: a kernel cannot tell which
    // of its calls are checked, so one that misbehaves on a fraction f of calls escapes
    // n checks with probability (1 - f)^n.
    const bool check_this = is_candidate && !is_warmup &&
                            (first_candidate_call || coin(chooser) < job_.timing.check_fraction);
    if (is_candidate && !is_warmup) first_candidate_call = false;
    if (check_this) {
      // The candidate's outputs are set aside on the device, the reference runs on the same
      // inputs, and a runner kernel compares the two; only a failure brings both to the
      // host, for compare_outputs' full report. One synchronisation per check, and no code
      // of the candidate runs between the comparison and the read of its result.
      for (std::size_t t = 0; t < n; ++t) {
        if (!tasks::is_output(task_.tensors[t].role) || setup.bytes[t] == 0) continue;
        check(cuMemcpyDtoDAsync(kept[t].data(), slot.tensor_ptrs[t], setup.bytes[t], stream),
              "keep outputs");
      }
      prepare_call(slot, this_call);
      launch(reference, setup.reference, setup, slot.tensor_ptrs, slot.reference_ws_ptrs);
      check(cuMemsetD8Async(check_results.data(), 0, check_results.bytes(), stream),
            "check results");
      for (std::size_t t = 0; t < n; ++t) {
        const auto& tensor = task_.tensors[t];
        if (!tasks::is_output(tensor.role)) continue;
        const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
        device_.launch_check(kept[t].data(), slot.tensor_ptrs[t], setup.counts[t], tensor.dtype,
                             tol.atol, tol.rtol, check_results.data() + 24 * t);
      }
      download(check_host, check_results.data(), check_results.bytes(), stream);
      sync_or_fail(stream, true, "in timed call " + std::to_string(this_call),
                   2 * job_.kernel_timeout_ms);
      bool suspect = false;
      for (std::size_t t = 0; t < n; ++t) {
        if (!tasks::is_output(task_.tensors[t].role)) continue;
        std::uint64_t verdict[3];
        std::memcpy(verdict, check_host + 24 * t, sizeof verdict);
        const bool all_zero = setup.counts[t] > 0 && verdict[1] == 0 && verdict[2] != 0;
        suspect |= verdict[0] != 0 || all_zero;
      }
      if (suspect) {
        // Both sides' outputs to the host, and (for a task checker) the call's inputs, which
        // preparing the call again restores; then the host's full verdict decides.
        std::vector<std::byte*> got(n, nullptr), want(n, nullptr);
        for (std::size_t t = 0; t < n; ++t) {
          if (!tasks::is_output(task_.tensors[t].role)) continue;
          got[t] = device_.staging("got:" + std::to_string(t), setup.bytes[t]);
          want[t] = device_.staging("want:" + std::to_string(t), setup.bytes[t]);
          download(got[t], kept[t].data(), setup.bytes[t], stream);
          download(want[t], slot.tensor_ptrs[t], setup.bytes[t], stream);
        }
        std::vector<std::byte*> call_inputs(n, nullptr);
        if (checker_ != nullptr) {
          prepare_call(slot, this_call);
          for (std::size_t t = 0; t < n; ++t) {
            call_inputs[t] = device_.staging("call input:" + std::to_string(t), setup.bytes[t]);
            download(call_inputs[t], slot.tensor_ptrs[t], setup.bytes[t], stream);
          }
        }
        check(cuStreamSynchronize(stream), "download");
        const auto reports =
            judge_outputs(setup, as_views(call_inputs), as_views(got), as_views(want), 0, true);
        for (const auto& report : reports) {
          if (report.reference_invalid()) {
            fail(StepStatus::kInfraError,
                 "the reference produced invalid output in a timed call of case " + c.name);
          }
          if (!report.pass) {
            fail(StepStatus::kIncorrect,
                 "case " + c.name + ", timed call " + std::to_string(this_call) +
                     ": the output was wrong although the correctness runs passed: " +
                     report.summary);
          }
        }
      }
      ++checked;
    }
    if (i % 32 == 31 || i + 1 == order.size()) {
      collect();
      const bool enough = should_stop(reference_ns, rule) && should_stop(candidate_ns, rule);
      const bool out_of_time = Clock::now() - started > cap;
      if (enough || out_of_time) break;
    }
  }
  collect();
  record_phase("timing " + c.name, started);
  if (timer_.dropped_records() > 0) {
    fail(StepStatus::kInfraError, "CUPTI dropped activity records; the timing is void");
  }
  if (reference_ns.empty() || candidate_ns.empty()) {
    fail(StepStatus::kInfraError, "no complete timed call was recorded for case " + c.name);
  }
  const auto reference_summary = summarize(reference_ns);
  const auto candidate_summary = summarize(candidate_ns);
  const double speedup = reference_summary.median_ns / candidate_summary.median_ns;
  // A floor must be optimistic: the highest bandwidth the card could reach (30 % above the
  // measured copy rate, never below the datasheet figure) and dense tensor-core peak.
  tasks::GpuPeak peak = tasks::kH200Peak;
  peak.memory_bytes_per_s = std::max(peak.memory_bytes_per_s, device_.copy_bandwidth_bps * 1.3);
  const double floor_ns = tasks::roofline_floor_ns(setup.cost, peak);
  if (candidate_summary.median_ns < floor_ns && hack_.empty()) {
    hack_ = "case " + c.name + ": your kernel's median time " +
            std::to_string(candidate_summary.median_ns) + " ns is below the roofline floor " +
            std::to_string(floor_ns) + " ns (" + std::to_string(setup.cost.bytes) + " bytes, " +
            std::to_string(setup.cost.flops) +
            " FLOPs): physically impossible, so the timing was not honest";
  }
  Value timed{{"case", c.name},
              {"weight", c.weight},
              {"symbols", setup.symbols_value},
              {"candidate", candidate_summary.to_value()},
              {"reference", reference_summary.to_value()},
              {"speedup", speedup},
              {"floor_ns", floor_ns},
              {"checked_calls", checked},
              {"incomplete_calls", incomplete},
              {"slots", slots_count}};
  if (library_ != nullptr) timed["reference_library"] = library_->describe(setup.index);
  return timed;
}

Value JobRunner::time_visible_cases() {
  Value cases = Value::array();
  std::vector<std::pair<double, double>> weighted;
  for (const auto& setup : cases_) {
    if (setup.c->hidden) continue;
    Value timed = time_case(setup);
    weighted.emplace_back(timed["speedup"].get<double>(), setup.c->weight);
    cases.push_back(std::move(timed));
  }
  const auto geomean = weighted_geomean(weighted);
  if (geomean) speedup_ = *geomean;
  Value out{{"cases", std::move(cases)}, {"method", "CUPTI kernel activity, median"}};
  if (geomean) out["speedup"] = *geomean;
  return out;
}

}  // namespace crucible::runner::child
