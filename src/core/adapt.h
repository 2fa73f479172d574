// The run-time choice among near-ties (CHORUS_ADAPT=1).
//
// The cost model separates algorithms well when their estimates differ by more than the noise of the machine.
// Where two or three estimates lie within kAdaptMargin of the cheapest, sweeps of the same code on the same
// machine disagree about which is fastest (docs/algorithms.md, "How close can a fixed table come?"), so no
// fixed table can be right in every run. For such a call shape, the executing thread times each near-tie in
// turn on the user's own calls, the ranks agree on the slowest rank's median per candidate, and every rank
// runs the argmin from then on. docs/design.md ("Choosing while running") has the whole path.
//
// Everything here is deterministic given the call sequence and the agreed figures, so every rank runs the
// same algorithm for the same call: the schedule depends only on the call's position among the calls of its
// shape, and the decision only on figures every rank holds after the agreement.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "algo/registry.h"

namespace chorus::core {

// Near-ties: estimates within this factor of the cheapest.
inline constexpr double kAdaptMargin = 1.15;
inline constexpr int kAdaptMaxCandidates = 3;
inline constexpr int kAdaptMaxRounds = 32;
inline constexpr int kAdaptDefaultRounds = 4;
// Each round times every candidate over a block of consecutive calls of the shape lasting about
// kAdaptBlockSeconds by the model's estimate (adapt_block): the order of near-ties on a shared machine
// depends on how the scheduler places the ranks, which a block of a few microsecond calls, inside one time
// slice, does not see.
inline constexpr double kAdaptBlockSeconds = 2e-3;
inline constexpr int kAdaptMinBlock = 2;
inline constexpr int kAdaptMaxBlock = 4096;
// The block for a shape whose cheapest estimate is `estimate` seconds: the same on every rank.
int adapt_block(double estimate);
// The model's choice (candidate 0) gives way only to a candidate whose agreed figure is at least this much
// lower. Smaller differences are within what the choice's target tolerates (10% of the best), and a few
// rounds of timing separate them less reliably than the measured tables, fitted over several runs, do.
inline constexpr double kAdaptSwitchGain = 0.10;
// After kAdaptRelookFactor times its exploration's calls (at least kAdaptRelookCalls) on the decided algorithm,
// a shape's candidates are timed again (the machine's load may have changed), so exploring takes at most
// about 2% of a shape's calls. Every rank counts alike, so every rank starts again at the same call.
inline constexpr uint32_t kAdaptRelookCalls = 4096;
inline constexpr uint32_t kAdaptRelookFactor = 50;

// The indices (into `estimates`, n entries; infinity: not applicable) of the near-ties, cheapest first, at most
// kAdaptMaxCandidates; ties in estimate keep the lower index first. Returns how many (0 when none applies).
int near_ties(const double* estimates, size_t n, double margin, int* out);

// The state of one call shape (collective, bytes) on one communicator; touched only under exec_mu.
//
// What is timed. A rank's own time inside one call says little: in a loop of calls, a rank that enters late
// finds its data already there and leaves at once, and the lag shows up in a later call. So each candidate
// runs a block of consecutive calls of the shape, and the figure is the wall time from the end of the block's
// first call to the end of its last, per call: whatever the candidate costs anywhere in the block, other
// ranks' lag included, is inside that span, and the first call absorbs the previous candidate's lag. With a
// block of one call the figure is the call's own duration. Rounds repeat the blocks; a rank's figure for a
// candidate is its median over rounds (one preempted block does not decide), and the ranks agree on the
// maximum over ranks.
class AdaptState {
 public:
  // `rounds` is clamped to [1, kAdaptMaxRounds], `block` to at least 1.
  AdaptState(const algo::Algorithm* const* candidates, int m, int rounds, int block);

  int candidates() const { return m_; }
  const algo::Algorithm* candidate(int i) const { return cand_[static_cast<size_t>(i)]; }
  bool exploring() const { return chosen_ < 0; }
  // The decided algorithm (null while exploring).
  const algo::Algorithm* chosen() const { return chosen_ < 0 ? nullptr : cand_[static_cast<size_t>(chosen_)]; }
  int rounds() const { return rounds_; }
  int block() const { return block_; }
  // Calls of the shape from the first of a timing to its agreement.
  uint32_t exploration_calls() const { return static_cast<uint32_t>(m_ * block_ * rounds_); }

  // Calls on the decided algorithm before the candidates are timed again.
  uint32_t relook_calls() const;

  // The algorithm for the next call of this shape: while exploring, candidate (call / block) mod m; once
  // decided, the winner, until relook_calls() calls later, when exploring starts again.
  const algo::Algorithm* next();
  // Records the call that next() just answered, by its start and end (seconds on a steady clock). True when
  // that was the last call of the exploration: the caller then agrees with the other ranks (local_figures,
  // then decide with the elementwise maximum over ranks).
  bool record(double start, double end);
  // This rank's median over rounds per candidate (m values; infinity for a candidate without a figure).
  void local_figures(double* out) const;
  // Takes the candidate with the smallest agreed figure (the first of equal ones) if it beats candidate 0, the
  // model's choice, by kAdaptSwitchGain; else candidate 0. Returns the index taken.
  int decide(const double* agreed);

 private:
  std::array<const algo::Algorithm*, kAdaptMaxCandidates> cand_{};
  int m_ = 1;
  int rounds_ = 1;
  int block_ = 1;
  int chosen_ = -1;
  int current_ = 0;    // the candidate next() last answered
  uint32_t call_ = 0;  // calls in the current phase (exploring or decided)
  double block_start_ = 0;
  std::array<std::array<double, kAdaptMaxRounds>, kAdaptMaxCandidates> times_{};
  std::array<int, kAdaptMaxCandidates> have_{};
};

}  // namespace chorus::core
