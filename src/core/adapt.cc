#include "core/adapt.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace chorus::core {

int near_ties(const double* estimates, size_t n, double margin, int* out) {
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) best = std::min(best, estimates[i]);
  if (!std::isfinite(best)) return 0;
  int idx[64];
  int k = 0;
  for (size_t i = 0; i < n && k < 64; ++i) {
    if (std::isfinite(estimates[i]) && estimates[i] <= best * margin) idx[k++] = static_cast<int>(i);
  }
  std::stable_sort(idx, idx + k, [&](int a, int b) { return estimates[a] < estimates[b]; });
  k = std::min(k, kAdaptMaxCandidates);
  std::copy(idx, idx + k, out);
  return k;
}

int adapt_block(double estimate) {
  if (!(estimate > 0)) return kAdaptMaxBlock;
  return static_cast<int>(
      std::clamp(std::ceil(kAdaptBlockSeconds / estimate), double{kAdaptMinBlock}, double{kAdaptMaxBlock}));
}

uint32_t AdaptState::relook_calls() const {
  return std::max(kAdaptRelookCalls, kAdaptRelookFactor * exploration_calls());
}

AdaptState::AdaptState(const algo::Algorithm* const* candidates, int m, int rounds, int block)
    : m_(std::clamp(m, 1, kAdaptMaxCandidates)),
      rounds_(std::clamp(rounds, 1, kAdaptMaxRounds)),
      block_(std::max(block, 1)) {
  std::copy(candidates, candidates + m_, cand_.begin());
  if (m_ == 1) chosen_ = 0;
}

const algo::Algorithm* AdaptState::next() {
  if (m_ == 1) return cand_[0];
  if (chosen_ >= 0) {
    if (++call_ <= relook_calls()) return cand_[static_cast<size_t>(chosen_)];
    chosen_ = -1;
    call_ = 0;
    have_.fill(0);
  }
  current_ = static_cast<int>((call_ / static_cast<uint32_t>(block_)) % static_cast<uint32_t>(m_));
  ++call_;
  return cand_[static_cast<size_t>(current_)];
}

bool AdaptState::record(double start, double end) {
  if (chosen_ >= 0) return false;
  const int b = static_cast<int>((call_ - 1) % static_cast<uint32_t>(block_));
  double figure = -1;
  if (block_ == 1) {
    figure = end - start;
  } else if (b == 0) {
    block_start_ = end;
  } else if (b == block_ - 1) {
    figure = (end - block_start_) / (block_ - 1);
  }
  int& h = have_[static_cast<size_t>(current_)];
  if (figure >= 0 && h < rounds_) times_[static_cast<size_t>(current_)][static_cast<size_t>(h++)] = figure;
  return call_ == exploration_calls();
}

void AdaptState::local_figures(double* out) const {
  for (int i = 0; i < m_; ++i) {
    std::array<double, kAdaptMaxRounds> v = times_[static_cast<size_t>(i)];
    const int n = have_[static_cast<size_t>(i)];
    if (n == 0) {
      out[i] = std::numeric_limits<double>::infinity();
      continue;
    }
    std::sort(v.begin(), v.begin() + n);
    out[i] =
        n % 2 ? v[static_cast<size_t>(n / 2)] : (v[static_cast<size_t>(n / 2 - 1)] + v[static_cast<size_t>(n / 2)]) / 2;
  }
}

int AdaptState::decide(const double* agreed) {
  int best = 0;
  for (int i = 1; i < m_; ++i) {
    if (agreed[i] < agreed[best]) best = i;
  }
  if (!(agreed[best] < agreed[0] * (1 - kAdaptSwitchGain))) best = 0;
  chosen_ = best;
  call_ = 0;
  return best;
}

}  // namespace chorus::core
