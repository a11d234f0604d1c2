// Correctness: every case, visible and hidden, twice, against the reference on the same inputs
// (docs/runner.md, "Correctness").
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device_values.hpp"
#include "runner/child/job_runner.hpp"
#include "runner/child/step_failure.hpp"
#include "tasks/generators.hpp"

namespace crucible::runner::child {

using core::StepStatus;

namespace {

// What a failed output comparison was, in words that carry no count, position or value.
std::string failure_kind(const judge::CompareReport& report) {
  const std::string name = "'" + report.output_name + "'";
  if (report.all_zero) return "all of " + name + " is zero where the answer is not";
  if (report.unwritten > 0) return "elements of " + name + " were left unwritten";
  if (report.nan_mismatches > 0) return name + " holds NaN or Inf where the answer does not";
  return "values of " + name + " are outside the tolerance";
}

}  // namespace

// The verdict on every out/inout tensor of one call: the task's checker when it names one
// (all outputs together, with the call's inputs), else compare_outputs per output. The
// vectors are indexed by task tensor; `inputs` may hold nullptr where no checker needs it.
std::vector<judge::CompareReport> JobRunner::judge_outputs(const CaseSetup& setup,
                                                           const Views& inputs,
                                                           const Views& candidate,
                                                           const Views& reference, int variant,
                                                           bool reveal) {
  std::vector<judge::CompareReport> reports;
  std::vector<judge::HostTensorView> input_views, candidate_views, reference_views;
  std::vector<judge::Tolerance> tolerances;
  for (std::size_t t = 0; t < task_.tensors.size(); ++t) {
    const auto& tensor = task_.tensors[t];
    input_views.push_back(judge::HostTensorView{tensor.name, tensor.dtype, inputs[t],
                                                setup.counts[t], setup.shapes[t]});
    if (!tasks::is_output(tensor.role)) continue;
    const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
    if (checker_ == nullptr) {
      reports.push_back(judge::compare_outputs(
          tensor.dtype, candidate[t], reference[t], setup.counts[t], setup.shapes[t],
          judge::Tolerance{tol.atol, tol.rtol}, variant, reveal, tensor.name));
      continue;
    }
    candidate_views.push_back(judge::HostTensorView{tensor.name, tensor.dtype, candidate[t],
                                                    setup.counts[t], setup.shapes[t]});
    reference_views.push_back(judge::HostTensorView{tensor.name, tensor.dtype, reference[t],
                                                    setup.counts[t], setup.shapes[t]});
    tolerances.push_back(judge::Tolerance{tol.atol, tol.rtol});
  }
  if (checker_ == nullptr) return reports;
  judge::TaskCheckRequest request;
  request.inputs = input_views;
  request.candidate = candidate_views;
  request.reference = reference_views;
  request.tolerances = tolerances;
  request.scalars = &setup.c->scalars;
  request.poison_variant = variant;
  request.reveal_values = reveal;
  reports = checker_->check(request);
  if (reports.size() != candidate_views.size()) {
    fail(StepStatus::kInfraError, "the '" + task_.checker + "' checker returned " +
                                      std::to_string(reports.size()) + " reports for " +
                                      std::to_string(candidate_views.size()) + " outputs");
  }
  return reports;
}

// Writes the poison of `variant` into every element of a device buffer: a memset for 1-, 2-
// and 4-byte elements, a host-filled copy for 8-byte ones.
void JobRunner::poison_device(CUdeviceptr dst, core::DType dtype, std::size_t count, int variant) {
  if (count == 0) return;
  const std::uint64_t bits = judge::poison_pattern(dtype, variant);
  const CUstream stream = device_.stream;
  switch (core::dtype_size(dtype)) {
    case 1:
      check(cuMemsetD8Async(dst, static_cast<unsigned char>(bits), count, stream), "poison");
      return;
    case 2:
      check(cuMemsetD16Async(dst, static_cast<unsigned short>(bits), count, stream), "poison");
      return;
    case 4:
      check(cuMemsetD32Async(dst, static_cast<unsigned int>(bits), count, stream), "poison");
      return;
    default: {
      std::vector<std::byte> host(count * core::dtype_size(dtype));
      judge::fill_poison(dtype, host.data(), count, variant);
      upload(dst, host.data(), host.size(), stream);
      check(cuStreamSynchronize(stream), "poison upload");
    }
  }
}

// Fills `out` (device memory of `count` elements) with the values of input `tensor` of case
// `c` drawn with `seed`: on the device where the generator allows (device_values.hpp, the host
// generators' bytes), else from the host cache, uploaded. Returns the host copy when one was
// made, else nullptr.
HostValueCache::Bytes JobRunner::fill_input(const tasks::Case& c, const tasks::TensorSpec& tensor,
                                            std::uint64_t seed, std::size_t count,
                                            CUdeviceptr out) {
  const auto& spec = c.values.at(tensor.name);
  if (generates_on_device(spec, tensor.dtype)) {
    generate_on_device(device_, spec, tensor.dtype, seed, 0, count, out);
    return nullptr;
  }
  // Seedless values (captured, rope_cache, long lists) are the same for every draw and
  // episode: one cache entry serves them all.
  const std::string key = task_.id + "|" + c.name + "|" + tensor.name + "|" +
                          (tasks::uses_seed(spec) ? std::to_string(seed) : "-") + "|" +
                          std::to_string(count);
  auto values = HostValueCache::instance().get(spec, tensor.dtype, count, seed, key);
  upload(out, values->data(), values->size(), device_.stream);
  return values;
}

// The device's verdict on the candidate's run of a case (no task checker): canaries, read-only
// inputs against their pristine copies and every output against the reference's, all on the
// GPU. True with `reports` filled (compare_outputs' reports, from the device's tallies) when
// everything passed; false when anything did not, and the host then looks at every byte to
// describe it.
bool JobRunner::device_verdict(const CaseSetup& setup, int draw, CaseBuffers& buffers,
                               std::vector<judge::CompareReport>& reports) {
  const CUstream stream = device_.stream;
  const std::size_t n = task_.tensors.size();
  const CUdeviceptr checks = buffers.results.data();
  check(cuMemsetD8Async(checks, 0, buffers.results.bytes(), stream), "results");
  for (std::size_t t = 0; t < n; ++t) {
    const auto& tensor = task_.tensors[t];
    const DeviceBuffer& buffer = buffers.tensors[t];
    check_canaries(buffer, buffers.canaries[t].data(), checks, t);
    if (tensor.role == tasks::Role::kIn && setup.bytes[t] > 0) {
      device_.launch_equal(buffer.data(), buffers.pristine[t].data(), setup.bytes[t],
                           TensorChecks::at(checks, t, 2));
    }
    if (tasks::is_output(tensor.role) && setup.counts[t] > 0) {
      const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
      device_.launch_check(buffer.data(), buffers.expected[t].data(), setup.counts[t], tensor.dtype,
                           tol.atol, tol.rtol, TensorChecks::at(checks, t, 2), draw);
    }
  }
  std::byte* host = device_.staging("case check results", buffers.results.bytes());
  download(host, checks, buffers.results.bytes(), stream);
  check(cuStreamSynchronize(stream), "device check");
  auto read = [&](std::size_t t, std::size_t k) { return TensorChecks::read(host, t, k); };
  std::vector<judge::CompareReport> passed;
  for (std::size_t t = 0; t < n; ++t) {
    const auto& tensor = task_.tensors[t];
    if (read(t, 0).failures != 0 || read(t, 1).failures != 0) return false;
    if (tensor.role == tasks::Role::kIn && read(t, 2).failures != 0) return false;
    if (!tasks::is_output(tensor.role)) continue;
    const CheckResult output = read(t, 2);
    if (!output.pass(setup.counts[t])) return false;
    const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
    passed.push_back(
        judge::passing_report(setup.counts[t], output.max_abs_error, output.max_rel_error,
                              judge::Tolerance{tol.atol, tol.rtol}, !setup.c->hidden, tensor.name));
  }
  reports = std::move(passed);
  return true;
}

// Runs reference then candidate on one draw of a case; records the verdict in case_reports_.
Value JobRunner::check_case(const CaseSetup& setup, int draw, CaseBuffers& buffers) {
  const auto& c = *setup.c;
  const CUstream stream = device_.stream;
  const std::size_t n = task_.tensors.size();
  // Where the host's time goes, summed over cases into phases "correctness: <part>".
  auto part_started = Clock::now();
  auto part_done = [&](const char* part) {
    add_to_phase(std::string("correctness: ") + part, milliseconds_since(part_started));
    part_started = Clock::now();
  };
  // Inputs: made on the device where the generator allows (device_values.hpp, the same bytes
  // as the host's), else made on the host and uploaded, into the pristine copies.
  std::vector<HostValueCache::Bytes> input_values(n);
  for (std::size_t t = 0; t < n; ++t) {
    const auto& tensor = task_.tensors[t];
    if (!tasks::is_input(tensor.role)) continue;
    const std::uint64_t seed =
        tasks::tensor_seed(setup.seed, tensor.name, static_cast<std::uint64_t>(draw));
    input_values[t] = fill_input(c, tensor, seed, setup.counts[t], buffers.pristine[t].data());
  }
  check(cuStreamSynchronize(stream), "inputs");
  part_done("inputs");
  const std::vector<CUdeviceptr>& pointers = buffers.pointers;
  auto write_all_canaries = [&] {
    for (std::size_t t = 0; t < n; ++t)
      write_canaries(buffers.tensors[t], buffers.canaries[t].data());
  };
  auto write_inputs_and_poison = [&](int variant) {
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      if (tasks::is_input(tensor.role)) {
        if (setup.bytes[t] > 0) {
          check(cuMemcpyDtoDAsync(pointers[t], buffers.pristine[t].data(), setup.bytes[t], stream),
                "restore inputs");
        }
      } else {
        poison_device(pointers[t], tensor.dtype, setup.counts[t], variant);
      }
    }
  };

  // Reference on pristine inputs; its outputs are kept on the device, scrambled with a key from
  // the job's secret while candidate code runs (a kernel that searched device memory for the
  // answer would find noise), and its workspaces are scrubbed.
  const std::uint64_t answer_key =
      mix(job_.secret, mix(setup.index, 0xA5500000u + static_cast<std::uint64_t>(draw)));
  auto scramble_answers = [&] {
    for (std::size_t t = 0; t < n; ++t) {
      if (tasks::is_output(task_.tensors[t].role)) {
        device_.scramble(buffers.expected[t].data(), setup.bytes[t], mix(answer_key, t));
      }
    }
  };
  {
    std::vector<DeviceBuffer> workspace;
    std::vector<CUdeviceptr> workspace_ptrs;
    for (const auto bytes : setup.reference.workspace_bytes) {
      workspace.emplace_back(bytes, false);
      workspace_ptrs.push_back(workspace.back().data());
    }
    write_all_canaries();
    write_inputs_and_poison(draw);
    check(cuStreamSynchronize(stream), "inputs");
    const auto reference_started = Clock::now();
    launch(reference_side(), setup.reference, setup, pointers, workspace_ptrs);
    sync_or_fail(stream, false, "on " + setup.label, job_.kernel_timeout_ms);
    const double reference_ms = milliseconds_since(reference_started);
    if (reference_ms_.size() < cases_.size()) reference_ms_.assign(cases_.size(), 0.0);
    reference_ms_[setup.index] = std::max(reference_ms_[setup.index], reference_ms);
    for (std::size_t t = 0; t < n; ++t) {
      if (!tasks::is_output(task_.tensors[t].role) || setup.bytes[t] == 0) continue;
      check(cuMemcpyDtoDAsync(buffers.expected[t].data(), pointers[t], setup.bytes[t], stream),
            "expected outputs");
    }
    scramble_answers();
    for (auto& buffer : workspace) {
      check(cuMemsetD8Async(buffer.data(), 0, buffer.bytes(), stream), "scrub");
    }
    if (library_ != nullptr) library_->scrub(stream);
    check(cuStreamSynchronize(stream), "reference outputs");
  }
  part_done("reference");

  // Candidate on the same inputs, workspaces full of junk, outputs poisoned again (first run)
  // or holding the first run's answer (second run): in production an output buffer holds the
  // previous call's result, and a kernel that skips work when its output looks computed must
  // fail here.
  std::vector<DeviceBuffer> workspace;
  std::vector<CUdeviceptr> workspace_ptrs;
  const unsigned char junk = workspace_junk(mix(setup.index, static_cast<std::uint64_t>(draw)));
  for (const auto bytes : setup.candidate.workspace_bytes) {
    workspace.emplace_back(bytes, false);
    check(cuMemsetD8Async(workspace.back().data(), junk, bytes, stream), "workspace fill");
    workspace_ptrs.push_back(workspace.back().data());
  }
  write_all_canaries();
  write_inputs_and_poison(draw);
  const bool stale = draw == 1 && buffers.stale_written;
  if (stale) {
    for (std::size_t t = 0; t < n; ++t) {
      if (task_.tensors[t].role != tasks::Role::kOut || setup.bytes[t] == 0) continue;
      check(cuMemcpyDtoDAsync(pointers[t], buffers.stale[t].data(), setup.bytes[t], stream),
            "stale outputs");
    }
  }
  check(cuStreamSynchronize(stream), "inputs");
  part_done("candidate set-up");
  launch(candidate_side(), setup.candidate, setup, pointers, workspace_ptrs);
  sync_or_fail(stream, true, "on " + setup.label, deadline_ms(setup), deadline_text(setup));
  part_done("candidate");
  scramble_answers();  // undone: the candidate has finished
  if (draw == 0) {
    for (std::size_t t = 0; t < n; ++t) {
      if (task_.tensors[t].role != tasks::Role::kOut || setup.bytes[t] == 0) continue;
      check(cuMemcpyDtoDAsync(buffers.stale[t].data(), buffers.expected[t].data(), setup.bytes[t],
                              stream),
            "stale outputs");
    }
    buffers.stale_written = true;
  }

  // A hidden case is named by its label only: no name, no symbols (they would give its shape).
  Value verdict{{"case", c.hidden ? setup.label : c.name}, {"hidden", c.hidden}, {"run", draw + 1}};
  if (!c.hidden) {
    verdict["symbols"] = setup.symbols_value;
    verdict["deadline_ms"] = deadline_ms(setup);
  }
  // Each problem twice: in detail (a visible case's reply) and as its kind only (a hidden
  // case's: no count, position or value that would tell its shape).
  std::vector<std::string> problems, kinds;
  std::vector<judge::CompareReport> reports;
  const bool clean = checker_ == nullptr && device_verdict(setup, draw, buffers, reports);
  part_done("device check");
  if (!clean) {
    // Every byte to the host: the guards, the payloads, the reference's outputs, the inputs
    // (those made on the host are there already).
    std::vector<std::byte*> whole(n, nullptr), expected(n, nullptr);
    std::vector<std::byte*> stale_bytes(n, nullptr);
    Views inputs(n, nullptr);
    for (std::size_t t = 0; t < n; ++t) {
      if (input_values[t] != nullptr) {
        inputs[t] = input_values[t]->data();
      } else if (tasks::is_input(task_.tensors[t].role)) {
        std::byte* host = device_.staging("input:" + std::to_string(t), setup.bytes[t]);
        download(host, buffers.pristine[t].data(), setup.bytes[t], stream);
        inputs[t] = host;
      }
      whole[t] = device_.staging("whole:" + std::to_string(t), buffers.tensors[t].total_bytes());
      download(whole[t], buffers.tensors[t].base(), buffers.tensors[t].total_bytes(), stream);
      if (!tasks::is_output(task_.tensors[t].role)) continue;
      expected[t] = device_.staging("expected:" + std::to_string(t), setup.bytes[t]);
      download(expected[t], buffers.expected[t].data(), setup.bytes[t], stream);
      if (stale && checker_ != nullptr && task_.tensors[t].role == tasks::Role::kOut) {
        stale_bytes[t] = device_.staging("stale:" + std::to_string(t), setup.bytes[t]);
        download(stale_bytes[t], buffers.stale[t].data(), setup.bytes[t], stream);
      }
    }
    check(cuStreamSynchronize(stream), "download");
    part_done("download");
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      std::size_t bad = 0;
      if (!judge::check_canary(whole[t], DeviceBuffer::kCanaryBytes, canary_seed(t, 0), &bad)) {
        problems.push_back("wrote " + std::to_string(DeviceBuffer::kCanaryBytes - bad) +
                           " bytes before the start of '" + tensor.name + "'");
        kinds.push_back("wrote before the start of '" + tensor.name + "'");
      }
      const std::byte* payload = whole[t] + DeviceBuffer::kCanaryBytes;
      if (!judge::check_canary(payload + setup.bytes[t], DeviceBuffer::kCanaryBytes,
                               canary_seed(t, 1), &bad)) {
        problems.push_back("wrote past the end of '" + tensor.name + "' (byte " +
                           std::to_string(bad) + " after its last element)");
        kinds.push_back("wrote past the end of '" + tensor.name + "'");
      }
      if (tensor.role == tasks::Role::kIn) {
        const auto diff = judge::compare_bytes(payload, inputs[t], setup.bytes[t]);
        if (!diff.equal) {
          problems.push_back("modified the read-only input '" + tensor.name + "' (" +
                             std::to_string(diff.diff_bytes) + " bytes changed, first at element " +
                             std::to_string(diff.first_diff / core::dtype_size(tensor.dtype)) +
                             ")");
          kinds.push_back("modified the read-only input '" + tensor.name + "'");
        }
      }
    }
    Views payloads(n, nullptr), before(n, nullptr);
    std::vector<std::vector<std::byte>> poisoned(n);
    for (std::size_t t = 0; t < n; ++t) {
      payloads[t] = whole[t] + DeviceBuffer::kCanaryBytes;
      if (tasks::is_input(task_.tensors[t].role)) {
        before[t] = inputs[t];
      } else if (checker_ != nullptr) {  // a checker sees what the call started from
        if (stale_bytes[t] != nullptr) {
          before[t] = stale_bytes[t];
          continue;
        }
        poisoned[t].resize(setup.bytes[t]);
        judge::fill_poison(task_.tensors[t].dtype, poisoned[t].data(), setup.counts[t], draw);
        before[t] = poisoned[t].data();
      }
    }
    reports = judge_outputs(setup, before, payloads, as_views(expected), draw, !c.hidden);
    part_done("compare");
  }
  Value outputs = Value::array();
  for (const auto& report : reports) {
    if (report.reference_invalid()) {
      fail(StepStatus::kInfraError, "the reference produced NaN on " + setup.label);
    }
    if (!report.pass) {
      problems.push_back(report.summary);
      kinds.push_back(failure_kind(report));
    }
    if (c.hidden) {
      outputs.push_back(Value{{"name", report.output_name}, {"pass", report.pass}});
    } else {
      outputs.push_back(report.to_value());
    }
  }
  verdict["outputs"] = std::move(outputs);
  verdict["pass"] = problems.empty();
  if (!problems.empty()) {
    verdict["problems"] = c.hidden ? kinds : problems;
    record_failure(setup, draw, problems, kinds);
  }
  return verdict;
}

void JobRunner::record_failure(const CaseSetup& setup, int draw,
                               const std::vector<std::string>& problems,
                               const std::vector<std::string>& kinds) {
  if (!failed_case_.empty()) return;
  std::string text;
  for (const auto& p : setup.c->hidden ? kinds : problems) text += (text.empty() ? "" : "; ") + p;
  failed_status_ = StepStatus::kIncorrect;
  failed_case_ = setup.label + " (run " + std::to_string(draw + 1) + "): " + text;
}

Value JobRunner::check_all_cases() {
  for (const auto& setup : cases_) {
    const auto started = Clock::now();
    CaseBuffers buffers;
    const std::size_t n = task_.tensors.size();
    for (std::size_t t = 0; t < n; ++t) {
      const auto role = task_.tensors[t].role;
      buffers.tensors.emplace_back(setup.bytes[t], true);
      buffers.pointers.push_back(buffers.tensors.back().data());
      buffers.pristine.emplace_back(tasks::is_input(role) ? DeviceBuffer(setup.bytes[t], false)
                                                          : DeviceBuffer());
      buffers.expected.emplace_back(tasks::is_output(role) ? DeviceBuffer(setup.bytes[t], false)
                                                           : DeviceBuffer());
      buffers.stale.emplace_back(role == tasks::Role::kOut ? DeviceBuffer(setup.bytes[t], false)
                                                           : DeviceBuffer());
      buffers.canaries.push_back(canary_patterns(t));
    }
    buffers.results = DeviceBuffer(TensorChecks::bytes(n), false);
    add_to_phase("correctness: buffers", milliseconds_since(started));
    for (int draw = 0; draw < 2; ++draw) {
      case_reports_.push_back(check_case(setup, draw, buffers));
      if (!failed_case_.empty()) break;
    }
    record_phase("correctness " + setup.c->name, started);
    if (!failed_case_.empty()) break;
  }
  return correctness_value();
}

Value JobRunner::correctness_value() const {
  std::size_t passed = 0;
  for (const auto& r : case_reports_) passed += r["pass"].get<bool>() ? 1 : 0;
  return Value{{"runs", case_reports_},
               {"passed", passed},
               {"checked", case_reports_.size()},
               {"total", cases_.size() * 2}};
}

double JobRunner::deadline_ms(const CaseSetup& setup) const {
  if (setup.index >= reference_ms_.size() || reference_ms_[setup.index] <= 0.0) {
    return job_.kernel_timeout_ms;
  }
  return std::clamp(kDeadlineFactor * reference_ms_[setup.index],
                    std::min(kDeadlineFloorMs, job_.kernel_timeout_ms), job_.kernel_timeout_ms);
}

std::string JobRunner::deadline_text(const CaseSetup& setup) const {
  if (!setup.c->hidden) return "";
  return "its deadline (" + std::to_string(static_cast<long>(kDeadlineFactor)) +
         " x the reference's time on the case, at least " +
         std::to_string(static_cast<long>(kDeadlineFloorMs)) + " ms)";
}

}  // namespace crucible::runner::child
