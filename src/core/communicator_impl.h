// The inside of a Communicator: its identity, transport, sequence numbers and failure state.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "algo/primitives.h"
#include "algo/registry.h"
#include "chorus/communicator.h"
#include "core/config.h"
#include "transport/transport.h"

namespace chorus {

struct Communicator::Impl {
  std::shared_ptr<Store> store;
  std::shared_ptr<void> keepalive;  // e.g. the TcpStoreServer that from_env hosts on rank 0
  CommOptions options;              // effective values, environment applied
  core::Config config;
  int rank = 0;
  int size = 1;
  uint64_t comm_tag = 0;
  std::string key_prefix;  // this communicator's keys in the store: "chorus/c<n>/"
  std::string label;       // "world r3/8", in logs
  std::unique_ptr<transport::Transport> transport;
  // Cost-model inputs for this transport and world size, from the tuning file or the built-in tuning.
  algo::LinkModel link;
  std::array<std::vector<algo::Calibration>, algo::kNumCollectives> calibration;
  std::string tuning_source;

  // Guarded by call_mu, which a call holds from start to end.
  std::mutex call_mu;
  uint64_t next_seq = 0;
  std::vector<uint64_t> p2p_send_seq, p2p_recv_seq;
  std::optional<Error> failure;
  std::atomic<bool> failed{false};
  algo::Scratch scratch;
  uint64_t splits = 0;
  std::vector<uint64_t> sent_to, received_from;
  uint64_t operations = 0;
  OperationInfo last_op;
  std::set<std::pair<int, size_t>> logged_choices;  // (collective, bytes) whose choice was logged

  ~Impl();
};

namespace core {
// Rendezvous through the store and connect the transport (Communicator::create).
std::unique_ptr<Communicator::Impl> bootstrap(std::shared_ptr<Store> store, int rank, int size,
                                              const CommOptions& options);
}  // namespace core

}  // namespace chorus
