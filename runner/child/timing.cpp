// Timing: the visible cases' timed calls, reference and candidate interleaved, checked at
// secret calls (docs/runner.md, "Timing").
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "judge/timing_stats.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device_values.hpp"
#include "runner/child/job_runner.hpp"
#include "runner/child/step_failure.hpp"
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
  // Redrawn in part (see kRedrawShare): the slot's own copy of what the input should hold, and
  // whether the slot was drawn whole yet.
  std::vector<DeviceBuffer> pristine;
  std::vector<bool> drawn;
};

// Large read-only inputs drawn fresh (a paged KV cache, a weight matrix) are redrawn in part:
// drawing all of one per call costs far more GPU time than the kernel under test (the paged
// cache's 268 MB of randn took ~1.4 ms a call against a 45 us kernel, most of a step's time).
// A call redraws a window of 1/kRedrawShare of such a tensor, at an offset taken from the call's
// secret seed, in the slot it uses and in that slot's pristine copy; a slot's first use draws
// all of it. Any position changes with probability 1/kRedrawShare per call, unpredictably to a
// kernel that does not read it, so anything precomputed from the input goes stale at random and
// the checked calls catch it; the reference of a checked call runs on the slot's pristine copy,
// exactly what the candidate saw. Every call does the same work, so no call stands out.
constexpr std::size_t kRedrawBytes = std::size_t{16} << 20;
constexpr std::uint64_t kRedrawShare = 8;

// Host-only generators that use a seed (MoE routing) cannot draw on the device: their timed
// calls pick among this many independent draws, made once per case.
constexpr std::size_t kHostDraws = 8;

// The most timed calls enqueued before the host waits for the GPU and reads their records.
constexpr std::size_t kMaxBatch = 32;

// How a timed call gets an input's values.
enum class Source {
  kFresh,  // drawn on the device from the call's own seed: no two calls alike
  kFixed,  // the same for every call and episode (rope tables, fixed lengths, captured values)
  kDrawn,  // one of kHostDraws host draws, chosen per call from the secret
};

}  // namespace

Value JobRunner::time_case(const CaseSetup& setup, double budget_ms) {
  const auto setup_started = Clock::now();
  const auto& c = *setup.c;
  const CUstream stream = device_.stream;
  const std::size_t n = task_.tensors.size();
  // The inputs redrawn in part: read-only, fresh, elementwise-independent values, large.
  std::vector<bool> partial(n, false);
  for (std::size_t t = 0; t < n; ++t) {
    const auto& tensor = task_.tensors[t];
    if (tensor.role != tasks::Role::kIn || setup.bytes[t] < kRedrawBytes) continue;
    const auto& spec = c.values.at(tensor.name);
    partial[t] =
        tasks::uses_seed(spec) && generates_on_device(spec, tensor.dtype) &&
        (spec.kind == tasks::GeneratorKind::kRandn || spec.kind == tasks::GeneratorKind::kUniform);
  }
  std::size_t slot_bytes = 0;
  for (std::size_t t = 0; t < n; ++t) slot_bytes += setup.bytes[t] * (partial[t] ? 2 : 1);
  for (const auto b : setup.reference.workspace_bytes) slot_bytes += b;
  for (const auto b : setup.candidate.workspace_bytes) slot_bytes += b;
  const std::size_t budget = std::size_t{4} << 30;
  const std::size_t slots_count =
      std::clamp<std::size_t>(budget / std::max<std::size_t>(slot_bytes, 1), 2, 8);

  // Where each input's values come from, and the outputs' poison.
  std::vector<Source> sources(n, Source::kFresh);
  std::vector<DeviceBuffer> fixed(n);   // kFixed: the values; kDrawn: kHostDraws of them
  std::vector<DeviceBuffer> poison(n);  // outputs
  std::vector<HostValueCache::Bytes> uploaded(n * kHostDraws);  // alive until the uploads end
  for (std::size_t t = 0; t < n; ++t) {
    const auto& tensor = task_.tensors[t];
    if (!tasks::is_input(tensor.role)) {
      poison[t] = DeviceBuffer(setup.bytes[t], false);
      poison_device(poison[t].data(), tensor.dtype, setup.counts[t], 0);
      continue;
    }
    const auto& spec = c.values.at(tensor.name);
    if (!tasks::uses_seed(spec)) {
      sources[t] = Source::kFixed;
      fixed[t] = DeviceBuffer(setup.bytes[t], false);
      uploaded[t * kHostDraws] = fill_input(c, tensor, 0, setup.counts[t], fixed[t].data());
    } else if (!generates_on_device(spec, tensor.dtype)) {
      sources[t] = Source::kDrawn;
      fixed[t] = DeviceBuffer(kHostDraws * setup.bytes[t], false);
      for (std::size_t d = 0; d < kHostDraws; ++d) {
        uploaded[t * kHostDraws + d] =
            fill_input(c, tensor, tasks::tensor_seed(setup.seed, tensor.name, 100 + d),
                       setup.counts[t], fixed[t].data() + d * setup.bytes[t]);
      }
    }
  }
  check(cuStreamSynchronize(stream), "timing values");
  uploaded.clear();

  // Slots: the same layout as the correctness runs (each tensor between two canaries, so a
  // kernel sees the same alignments in both), rotated so consecutive calls use other addresses.
  std::vector<DeviceBuffer> canaries;  // per tensor: the front and back canary patterns
  for (std::size_t t = 0; t < n; ++t) canaries.push_back(canary_patterns(t));
  std::vector<Slot> slots(slots_count);
  for (auto& slot : slots) {
    for (std::size_t t = 0; t < n; ++t) {
      slot.tensors.emplace_back(setup.bytes[t], true);
      slot.tensor_ptrs.push_back(slot.tensors.back().data());
      write_canaries(slot.tensors.back(), canaries[t].data());
    }
    for (const auto b : setup.reference.workspace_bytes) {
      slot.reference_ws.emplace_back(b, false);
      slot.reference_ws_ptrs.push_back(slot.reference_ws.back().data());
    }
    for (const auto b : setup.candidate.workspace_bytes) {
      slot.candidate_ws.emplace_back(b, false);
      slot.candidate_ws_ptrs.push_back(slot.candidate_ws.back().data());
    }
    slot.pristine.resize(n);
    slot.drawn.assign(n, false);
    for (std::size_t t = 0; t < n; ++t) {
      if (partial[t]) slot.pristine[t] = DeviceBuffer(setup.bytes[t], false);
    }
  }

  // A call's inputs into `dst` (one pointer per task tensor; outputs skipped): fresh values
  // from the call's seed, the fixed ones, or the host draw the call's seed picks. With a slot,
  // the inputs redrawn in part get their window (or, on the slot's first use, all of it) in the
  // slot and its pristine copy; without one (a checked call's pristine inputs) they are skipped.
  auto write_inputs = [&](const std::vector<CUdeviceptr>& dst, std::size_t call, Slot* slot) {
    const std::uint64_t call_seed = judge::timed_call_seed(job_.secret, setup.seed, call);
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      if (!tasks::is_input(tensor.role) || setup.bytes[t] == 0) continue;
      if (partial[t]) {
        if (slot == nullptr) continue;
        const auto& spec = c.values.at(tensor.name);
        const std::uint64_t seed = tasks::tensor_seed(call_seed, tensor.name, 0);
        const std::uint64_t count = setup.counts[t];
        const std::size_t size = setup.bytes[t] / setup.counts[t];
        std::uint64_t first = 0, length = count;
        if (slot->drawn[t]) {
          first = mix(call_seed, n + t) % count;
          length = (count + kRedrawShare - 1) / kRedrawShare;
        }
        for (const CUdeviceptr base : {dst[t], slot->pristine[t].data()}) {
          const std::uint64_t head = std::min(length, count - first);
          generate_on_device(device_, spec, tensor.dtype, seed, first, head, base + first * size,
                             Draw::kFast);
          if (head < length) {
            generate_on_device(device_, spec, tensor.dtype, seed, 0, length - head, base,
                               Draw::kFast);
          }
        }
        slot->drawn[t] = true;
        continue;
      }
      switch (sources[t]) {
        case Source::kFresh:
          generate_on_device(device_, c.values.at(tensor.name), tensor.dtype,
                             tasks::tensor_seed(call_seed, tensor.name, 0), 0, setup.counts[t],
                             dst[t], Draw::kFast);
          break;
        case Source::kFixed:
          check(cuMemcpyDtoDAsync(dst[t], fixed[t].data(), setup.bytes[t], stream), "inputs");
          break;
        case Source::kDrawn: {
          const std::size_t d = mix(call_seed, t) % kHostDraws;
          check(cuMemcpyDtoDAsync(dst[t], fixed[t].data() + d * setup.bytes[t], setup.bytes[t],
                                  stream),
                "inputs");
          break;
        }
      }
    }
  };
  auto poison_outputs = [&](const Slot& slot) {
    for (std::size_t t = 0; t < n; ++t) {
      if (tasks::is_input(task_.tensors[t].role) || setup.bytes[t] == 0) continue;
      check(cuMemcpyDtoDAsync(slot.tensor_ptrs[t], poison[t].data(), setup.bytes[t], stream),
            "poison");
    }
  };
  // Everything a call starts from, outside the timed kernels: its inputs, poisoned outputs,
  // the candidate's workspaces full of junk that differs from call to call, a flushed L2.
  auto prepare_call = [&](Slot& slot, std::size_t call, bool candidate) {
    write_inputs(slot.tensor_ptrs, call, &slot);
    poison_outputs(slot);
    if (candidate) {
      const unsigned char junk = workspace_junk(0x77 + call);
      for (std::size_t w = 0; w < slot.candidate_ws.size(); ++w) {
        check(
            cuMemsetD8Async(slot.candidate_ws_ptrs[w], junk, slot.candidate_ws[w].bytes(), stream),
            "workspace junk");
      }
    }
    device_.flush_l2(static_cast<std::uint32_t>(call));
  };

  judge::ScheduleRule schedule_rule;
  schedule_rule.warmup_pairs = job_.timing.warmup_calls;
  schedule_rule.min_samples = job_.timing.min_samples;
  schedule_rule.max_samples = job_.timing.max_samples;
  schedule_rule.check_fraction = job_.timing.check_fraction;
  const judge::CallSchedule schedule =
      judge::make_call_schedule(job_.secret, setup.index, schedule_rule);

  const Side reference = reference_side();
  const Side candidate = candidate_side();
  const std::size_t candidate_launches = setup.candidate.launches.size();
  const std::size_t reference_launches = library_ != nullptr
                                             ? library_->kernels_per_call(setup.index)
                                             : setup.reference.launches.size();

  struct Pending {
    bool is_candidate;
    bool counted;
  };
  std::map<std::uint64_t, Pending> pending;
  std::vector<double> reference_ns, candidate_ns;
  std::size_t checked = 0, incomplete = 0, call = 0, measured_candidate_calls = 0;
  const auto started = Clock::now();
  const auto cap = std::chrono::duration<double, std::milli>(job_.timing.time_cap_ms);
  judge::StoppingRule rule;
  rule.target_rel_halfwidth = job_.timing.target_rel_ci;
  rule.min_samples = job_.timing.min_samples;
  rule.max_samples = job_.timing.max_samples;
  const auto order = judge::interleaved_order(job_.timing.max_samples + schedule.warmup_pairs);
  // Why the measurement ended: both intervals within target_rel_ci ("interval"), max_samples,
  // the case's time_cap_ms, or the case's share of the step's budget with min_samples a side.
  std::string stopped = "max_samples";

  // Checked calls: the candidate's outputs set aside, the call's inputs drawn again (the
  // pristine copy), the reference on them, and the runner's device checks (three per tensor:
  // two canaries and one input-or-output comparison). Their verdicts are read at the next
  // collect(), which waits for the stream anyway: a checked call does not stop the stream.
  // Until then its evidence stays on the device in a check set (the candidate's and the
  // reference's outputs, and the call's inputs for a task checker), from which the host
  // judges a suspect call in full; with every set in use, a checked call collects first.
  std::vector<DeviceBuffer> pristine(n);
  std::vector<CUdeviceptr> pristine_ptrs(n, 0);
  std::size_t set_bytes = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const auto role = task_.tensors[t].role;
    if (tasks::is_input(role) && !partial[t]) {
      pristine[t] = DeviceBuffer(setup.bytes[t], false);
      pristine_ptrs[t] = pristine[t].data();
    }
    if (tasks::is_output(role)) set_bytes += 2 * setup.bytes[t];
    if (checker_ != nullptr && tasks::is_input(role)) set_bytes += setup.bytes[t];
  }
  struct CheckSet {
    std::vector<DeviceBuffer> got, want, inputs;  // per task tensor (unused ones empty)
    DeviceBuffer results;                         // a TensorChecks block
    std::byte* host = nullptr;                    // the results, downloaded
    std::size_t call = 0;
  };
  // Allocated as first needed (most cases use one or two); sets[0, waiting) hold calls whose
  // verdicts are not read yet, in call order.
  const std::size_t max_sets =
      std::clamp<std::size_t>((std::size_t{1} << 30) / std::max<std::size_t>(set_bytes, 1), 1, 8);
  std::vector<CheckSet> sets;
  sets.reserve(max_sets);
  std::size_t waiting = 0;
  auto next_set = [&]() -> CheckSet& {
    if (waiting < sets.size()) return sets[waiting];
    CheckSet& set = sets.emplace_back();
    for (std::size_t t = 0; t < n; ++t) {
      const auto role = task_.tensors[t].role;
      const bool output = tasks::is_output(role);
      set.got.emplace_back(output ? setup.bytes[t] : 0, false);
      set.want.emplace_back(output ? setup.bytes[t] : 0, false);
      set.inputs.emplace_back(checker_ != nullptr && tasks::is_input(role) ? setup.bytes[t] : 0,
                              false);
    }
    set.results = DeviceBuffer(TensorChecks::bytes(n), false);
    set.host =
        device_.staging("check results " + std::to_string(sets.size() - 1), set.results.bytes());
    return set;
  };
  record_phase("timing setup " + c.name, setup_started);

  auto enqueue_check = [&](CheckSet& set, const Slot& slot, std::size_t this_call) {
    set.call = this_call;
    for (std::size_t t = 0; t < n; ++t) {
      if (!tasks::is_output(task_.tensors[t].role) || setup.bytes[t] == 0) continue;
      check(cuMemcpyDtoDAsync(set.got[t].data(), slot.tensor_ptrs[t], setup.bytes[t], stream),
            "keep outputs");
    }
    write_inputs(pristine_ptrs, this_call, nullptr);
    // What the call's inputs were: the slot's own copy for those redrawn in part.
    std::vector<CUdeviceptr> before = pristine_ptrs;
    for (std::size_t t = 0; t < n; ++t) {
      if (partial[t]) before[t] = slot.pristine[t].data();
    }
    const CUdeviceptr checks = set.results.data();
    check(cuMemsetD8Async(checks, 0, set.results.bytes(), stream), "results");
    for (std::size_t t = 0; t < n; ++t) {
      check_canaries(slot.tensors[t], canaries[t].data(), checks, t);
      if (task_.tensors[t].role == tasks::Role::kIn) {
        device_.launch_equal(slot.tensor_ptrs[t], before[t], setup.bytes[t],
                             TensorChecks::at(checks, t, 2));
      }
    }
    // The reference runs on the same inputs (in-place tensors restored) in the same slot.
    for (std::size_t t = 0; t < n; ++t) {
      if (!tasks::is_input(task_.tensors[t].role) || setup.bytes[t] == 0) continue;
      if (checker_ != nullptr) {
        check(cuMemcpyDtoDAsync(set.inputs[t].data(), before[t], setup.bytes[t], stream),
              "keep inputs");
      }
      check(cuMemcpyDtoDAsync(slot.tensor_ptrs[t], before[t], setup.bytes[t], stream),
            "restore inputs");
    }
    poison_outputs(slot);
    launch(reference, setup.reference, setup, slot.tensor_ptrs, slot.reference_ws_ptrs);
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      if (!tasks::is_output(tensor.role)) continue;
      if (setup.bytes[t] > 0) {
        check(cuMemcpyDtoDAsync(set.want[t].data(), slot.tensor_ptrs[t], setup.bytes[t], stream),
              "keep reference outputs");
      }
      const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
      device_.launch_check(set.got[t].data(), set.want[t].data(), setup.counts[t], tensor.dtype,
                           tol.atol, tol.rtol, TensorChecks::at(checks, t, 2));
    }
    download(set.host, checks, set.results.bytes(), stream);
  };

  // The verdict on a checked call whose results are on the host (after a synchronize).
  auto judge_check = [&](const CheckSet& set) {
    auto verdict = [&](std::size_t t, std::size_t k) { return TensorChecks::read(set.host, t, k); };
    const std::string where = setup.label + ", timed call " + std::to_string(set.call);
    bool suspect = false;
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      if (verdict(t, 0).failures != 0) {
        fail(StepStatus::kIncorrect, where + ": wrote " + std::to_string(verdict(t, 0).failures) +
                                         " bytes before the start of '" + tensor.name +
                                         "' (the correctness runs passed)");
      }
      if (verdict(t, 1).failures != 0) {
        fail(StepStatus::kIncorrect,
             where + ": wrote past the end of '" + tensor.name + "' (the correctness runs passed)");
      }
      if (tensor.role == tasks::Role::kIn && verdict(t, 2).failures != 0) {
        fail(StepStatus::kIncorrect, where + ": modified the read-only input '" + tensor.name +
                                         "' (changed in " + std::to_string(verdict(t, 2).failures) +
                                         " places; the correctness runs passed)");
      }
      if (!tasks::is_output(tensor.role)) continue;
      suspect |= !verdict(t, 2).pass(setup.counts[t]);
    }
    if (!suspect) return;
    // Both sides' outputs to the host, and (for a task checker) the call's inputs; then the
    // host's full verdict decides.
    std::vector<std::byte*> got(n, nullptr), want(n, nullptr), call_inputs(n, nullptr);
    for (std::size_t t = 0; t < n; ++t) {
      if (tasks::is_output(task_.tensors[t].role)) {
        got[t] = device_.staging("got:" + std::to_string(t), setup.bytes[t]);
        want[t] = device_.staging("want:" + std::to_string(t), setup.bytes[t]);
        download(got[t], set.got[t].data(), setup.bytes[t], stream);
        download(want[t], set.want[t].data(), setup.bytes[t], stream);
      }
      if (checker_ != nullptr && tasks::is_input(task_.tensors[t].role)) {
        call_inputs[t] = device_.staging("call input:" + std::to_string(t), setup.bytes[t]);
        download(call_inputs[t], set.inputs[t].data(), setup.bytes[t], stream);
      }
    }
    check(cuStreamSynchronize(stream), "download");
    const auto reports =
        judge_outputs(setup, as_views(call_inputs), as_views(got), as_views(want), 0, !c.hidden);
    for (const auto& report : reports) {
      if (report.reference_invalid()) {
        fail(StepStatus::kInfraError,
             "the reference produced invalid output in a timed call of " + setup.label);
      }
      if (!report.pass) {
        fail(StepStatus::kIncorrect,
             where +
                 ": the output was wrong although the correctness runs passed: " + report.summary);
      }
    }
  };

  // Where the host's time in the timed calls goes (milliseconds): preparing calls (inputs,
  // poison, workspace junk, the L2 sweep), launching the timed kernels, the checked calls, and
  // each batch's wait for the stream and CUPTI's records.
  double prepare_ms = 0, launch_ms = 0, check_ms = 0, sync_ms = 0, records_ms = 0;
  auto collect = [&] {
    // A batch's calls (up to kMaxBatch, each side's kernels) may be in flight.
    auto from = Clock::now();
    sync_or_fail(stream, true, "in timed calls of " + setup.label,
                 2 * kMaxBatch * deadline_ms(setup));
    sync_ms += milliseconds_since(from);
    from = Clock::now();
    const auto spans = timer_.collect();
    records_ms += milliseconds_since(from);
    for (std::size_t k = 0; k < waiting; ++k) judge_check(sets[k]);
    waiting = 0;
    for (const auto& [tag, span] : spans) {
      const auto it = pending.find(tag);
      if (it == pending.end()) continue;
      const std::size_t expected_kernels =
          it->second.is_candidate ? candidate_launches : reference_launches;
      if (span.operations() != expected_kernels) {
        ++incomplete;
      } else if (it->second.counted) {
        (it->second.is_candidate ? candidate_ns : reference_ns).push_back(span.duration_ns());
      }
      pending.erase(it);
    }
  };
  auto check_call = [&](const Slot& slot, std::size_t this_call) {
    if (waiting == max_sets) collect();
    enqueue_check(next_set(), slot, this_call);
    ++waiting;
  };
  auto timed_call = [&](bool is_candidate, bool counted) {
    Slot& slot = slots[call % slots.size()];
    const std::size_t this_call = call++;
    auto from = Clock::now();
    prepare_call(slot, this_call, is_candidate);
    prepare_ms += milliseconds_since(from);
    const std::uint64_t tag = next_tag_++;
    pending[tag] = Pending{is_candidate, counted};
    from = Clock::now();
    {
      const TagScope scope(timer_, tag);
      launch(is_candidate ? candidate : reference, is_candidate ? setup.candidate : setup.reference,
             setup, slot.tensor_ptrs,
             is_candidate ? slot.candidate_ws_ptrs : slot.reference_ws_ptrs);
    }
    launch_ms += milliseconds_since(from);
    return std::pair<const Slot*, std::size_t>(&slot, this_call);
  };

  // Batches of calls end where the rule can first stop (the warm-up pairs and min_samples a
  // side: batches before it end kMaxBatch calls apart, counting back from it), then where the
  // samples so far say it will (judge::samples_to_stop of the side that needs more), 8 to
  // kMaxBatch calls on: with fixed 32-call batches a case that stops at its minimum ran 97
  // calls instead of 71. judge::after_batch decides at each batch's end (stopping included).
  judge::BatchPlan batches;
  batches.total_calls = order.size();
  batches.warmup_calls = 2 * schedule.warmup_pairs;
  batches.first_stop =
      std::min(order.size(), 2 * (schedule.warmup_pairs + job_.timing.min_samples));
  batches.max_batch = kMaxBatch;
  std::size_t next_collect = judge::first_batch_end(batches);
  bool extended_past_cap = false;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const bool is_candidate = order[i] == 1;
    const bool is_warmup = i < 2 * schedule.warmup_pairs;
    const auto [slot, this_call] = timed_call(is_candidate, !is_warmup);
    // The schedule's secret calls: a kernel cannot tell which of its calls are checked, so one
    // that computes wrongly on a share f of them escapes m checks with probability (1 - f)^m.
    if (is_candidate && !is_warmup) {
      const bool check_this = schedule.checked[measured_candidate_calls++];
      if (check_this) {
        const auto from = Clock::now();
        check_call(*slot, this_call);
        check_ms += milliseconds_since(from);
        ++checked;
      }
    }
    if (i + 1 == next_collect) {
      collect();
      judge::BatchEnd end;
      end.calls = i + 1;
      end.reference_samples = reference_ns.size();
      end.candidate_samples = candidate_ns.size();
      // Where each side's rule will stop (at or below its count: it stops now).
      end.reference_wanted = judge::samples_to_stop(reference_ns, rule);
      end.candidate_wanted = judge::samples_to_stop(candidate_ns, rule);
      end.min_samples = rule.min_samples;
      end.max_samples = rule.max_samples;
      end.spent_ms = milliseconds_since(started);
      end.cap_ms = cap.count();
      end.budget_ms = budget_ms;
      end.extended_past_cap = extended_past_cap;
      const judge::BatchDecision decision = judge::after_batch(batches, end);
      if (!decision.stop.empty()) {
        stopped = decision.stop;
        break;
      }
      extended_past_cap = decision.extended_past_cap;
      next_collect = decision.next_end;
    }
  }
  // The last call is always checked: one more candidate call, prepared like every other, so a
  // kernel that behaves only in its first calls is caught whenever the measurement stops.
  {
    const auto [slot, this_call] = timed_call(true, false);
    check_call(*slot, this_call);
    ++checked;
  }
  collect();
  record_phase("timing " + c.name, started);
  if (timer_.dropped_records() > 0) {
    fail(StepStatus::kInfraError, "CUPTI dropped activity records; the timing is void");
  }
  if (reference_ns.empty() || candidate_ns.empty()) {
    fail(StepStatus::kInfraError, "no complete timed call was recorded for case " + c.name);
  }
  const auto reference_summary = judge::summarize(reference_ns);
  const auto candidate_summary = judge::summarize(candidate_ns);
  const judge::SpeedupEstimate estimate =
      judge::speedup_estimate(reference_summary, candidate_summary);
  const tasks::GpuPeak peak = floor_peak();
  const double floor_ns = tasks::roofline_floor_ns(floor_cost(setup), peak);
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
              {"speedup", estimate.speedup},
              {"speedup_ci95", estimate.to_value()},
              {"floor_ns", floor_ns},
              {"deadline_ms", deadline_ms(setup)},
              {"warmup_pairs", schedule.warmup_pairs},
              {"checked_calls", checked},
              {"incomplete_calls", incomplete},
              {"calls", call},
              {"stopped", stopped},
              {"budget_ms", budget_ms},
              {"host_ms",
               {{"prepare", prepare_ms},
                {"launch", launch_ms},
                {"checked_calls", check_ms},
                {"sync", sync_ms},
                {"records", records_ms}}},
              {"slots", slots_count}};
  for (const auto& [part, ms] : timed["host_ms"].items()) {
    add_to_phase("timed calls: " + part, ms.get<double>());
  }
  if (library_ != nullptr) timed["reference_library"] = library_->describe(setup.index);
  estimates_.emplace_back(estimate, c.weight);
  return timed;
}

Value JobRunner::time_visible_cases() {
  Value cases = Value::array();
  estimates_.clear();
  // The step's budget, shared: each case may use what is left of it over the cases left.
  std::size_t left = 0;
  for (const auto& setup : cases_) left += setup.c->hidden ? 0 : 1;
  const auto started = Clock::now();
  for (const auto& setup : cases_) {
    if (setup.c->hidden) continue;
    const double remaining =
        std::max(0.0, job_.timing.step_budget_ms - milliseconds_since(started));
    cases.push_back(time_case(setup, remaining / static_cast<double>(left--)));
  }
  const auto combined = judge::combined_speedup(estimates_);
  Value out{{"cases", std::move(cases)}, {"method", "CUPTI kernel activity, median"}};
  if (combined) {
    speedup_ = combined->speedup;
    out["speedup"] = combined->speedup;
    out["speedup_ci95"] = combined->to_value();
  }
  return out;
}

// The floor must be a time no correct kernel can beat. Bandwidth: on a GPU whose datasheet
// is known (the H200's 4.8 TB/s HBM3e pin rate, which no kernel reaches), the datasheet; on
// any other, 1.3 times the measured copy rate. Compute: dense tensor-core peak.
tasks::GpuPeak JobRunner::floor_peak() const {
  if (device_.name.find("H200") != std::string::npos) return tasks::kH200Peak;
  tasks::GpuPeak peak = tasks::kH200Peak;
  if (device_.copy_bandwidth_bps > 0) peak.memory_bytes_per_s = device_.copy_bandwidth_bps * 1.3;
  return peak;
}

// Bytes a call must move through HBM: the roofline's bytes less what the L2 can hold of the
// outputs. With the L2 flushed before each call every input byte comes from HBM, but a store
// completes once the L2 takes it, so up to an L2's worth of output can still be on its way to
// HBM when the kernel ends.
tasks::RooflineCost JobRunner::floor_cost(const CaseSetup& setup) const {
  std::size_t written = 0;
  for (std::size_t t = 0; t < task_.tensors.size(); ++t) {
    if (tasks::is_output(task_.tensors[t].role)) written += setup.bytes[t];
  }
  tasks::RooflineCost cost = setup.cost;
  const auto absorbed = static_cast<std::int64_t>(std::min(written, device_.l2_bytes));
  cost.bytes = std::max<std::int64_t>(0, cost.bytes - absorbed);
  return cost;
}

}  // namespace crucible::runner::child
