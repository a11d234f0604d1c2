// Runs a form of llm/grouped_topk's kernel (KERNEL: the reference or a variant of variants.py,
// its grouped_topk_e256 kernel) on the CPU under cuda_host_emulation.hpp and holds every token
// to float64 routing: the same set of experts (ties at the k-th place go to the lower index, as
// the reference breaks them), the same order where no two choice scores tie, and weights within
// the task's tolerance (atol 1e-6, rtol 1e-5).
//   grouped_topk_host TOKENS GROUPS TOPK_GROUP TOPK STD SEED [TIES]
// STD is the logits' standard deviation (30: saturated sigmoids); TIES=1 rounds the logits to
// integers and zeroes the bias (exact ties everywhere). Prints a summary line; exit status 1 when
// some token differs.
#include <cstdio>
#include <random>
#include <set>

#include "cuda_host_emulation.hpp"

#include KERNEL

namespace {

constexpr int kExperts = 256;

// The float64 routing of one token: ids in descending choice order (ties: lower index), weights.
void route(const float* logits, const float* bias, int groups, int topk_group, int topk,
           std::vector<int>& ids, std::vector<double>& weights) {
  std::vector<double> score(kExperts), choice(kExperts);
  for (int e = 0; e < kExperts; ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    choice[e] = score[e] + bias[e];
  }
  const int size = kExperts / groups;
  std::vector<double> group_score(groups);
  for (int q = 0; q < groups; ++q) {
    std::vector<double> v(choice.begin() + q * size, choice.begin() + (q + 1) * size);
    std::sort(v.rbegin(), v.rend());
    group_score[q] = v[0] + v[1];
  }
  std::vector<int> order(groups);
  for (int q = 0; q < groups; ++q) order[q] = q;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return group_score[a] > group_score[b]; });
  std::vector<char> kept(groups, 0);
  for (int i = 0; i < topk_group; ++i) kept[order[i]] = 1;
  std::vector<int> experts;
  for (int e = 0; e < kExperts; ++e) {
    if (kept[e / size]) experts.push_back(e);
  }
  std::stable_sort(experts.begin(), experts.end(),
                   [&](int a, int b) { return choice[a] > choice[b]; });
  ids.assign(experts.begin(), experts.begin() + topk);
  double sum = 0.0;
  for (const int e : ids) sum += score[e];
  weights.clear();
  for (const int e : ids) weights.push_back(score[e] / sum * 2.5);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s TOKENS GROUPS TOPK_GROUP TOPK STD SEED [TIES]\n", argv[0]);
    return 2;
  }
  const int tokens = std::atoi(argv[1]), groups = std::atoi(argv[2]);
  const int topk_group = std::atoi(argv[3]), topk = std::atoi(argv[4]);
  const float std_dev = static_cast<float>(std::atof(argv[5]));
  const bool ties = argc > 7 && std::atoi(argv[7]) != 0;
  std::mt19937 rng(static_cast<unsigned>(std::atoi(argv[6])));
  std::normal_distribution<float> logit(0.0f, std_dev), offset(0.0f, 0.1f);
  std::vector<float> logits(static_cast<size_t>(tokens) * kExperts), bias(kExperts);
  std::vector<float> weights(static_cast<size_t>(tokens) * topk, -1.0f);
  std::vector<int> ids(static_cast<size_t>(tokens) * topk, -1);
  for (float& x : logits) x = ties ? std::round(logit(rng)) : logit(rng);
  for (float& b : bias) b = ties ? 0.0f : offset(rng);
  cuda_host::launch((tokens + 3) / 4, 128, [&] {
    grouped_topk_e256(weights.data(), ids.data(), logits.data(), bias.data(), groups, topk_group, 1,
                      2.5f, tokens, topk);
  });
  int wrong_set = 0, wrong_weight = 0, reordered = 0;
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> want;
    std::vector<double> want_weights;
    route(&logits[static_cast<size_t>(t) * kExperts], bias.data(), groups, topk_group, topk, want,
          want_weights);
    const int* got = &ids[static_cast<size_t>(t) * topk];
    if (std::set<int>(want.begin(), want.end()) != std::set<int>(got, got + topk)) {
      ++wrong_set;
      continue;
    }
    for (int j = 0; j < topk; ++j) {
      reordered += got[j] != want[j] ? 1 : 0;
      const auto at = std::find(want.begin(), want.end(), got[j]) - want.begin();
      const double expected = want_weights[static_cast<size_t>(at)];
      const double error = std::abs(weights[static_cast<size_t>(t) * topk + j] - expected);
      wrong_weight += error > 1e-6 + 1e-5 * std::abs(expected) ? 1 : 0;
    }
  }
  std::printf("%d tokens: %d expert sets differ, %d weights outside tolerance, %d reordered\n",
              tokens, wrong_set, wrong_weight, reordered);
  return wrong_set != 0 || wrong_weight != 0 ? 1 : 0;
}
