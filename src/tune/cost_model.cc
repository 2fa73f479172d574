#include "tune/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace chorus::tune {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& why) {
  base::throw_error(ErrorCode::InvalidArgument, fmt::format("tuning file {}: {}", source, why));
}

double number(const json& j, const char* key, const std::string& source, double lo, double hi) {
  if (!j.contains(key) || !j[key].is_number()) bad(source, fmt::format("missing number '{}'", key));
  double v = j[key].get<double>();
  if (!(v >= lo) || v > hi) bad(source, fmt::format("'{}' = {} is out of range [{}, {}]", key, v, lo, hi));
  return v;
}

// An algorithm's table of times (`field`: "measured", "registered" or "registered_in_place"), ascending in
// bytes; empty when absent.
std::vector<std::pair<double, double>> times(const json& f, const std::string& key, const char* field,
                                             const std::string& source) {
  std::vector<std::pair<double, double>> out;
  if (!f.contains(field)) return out;
  if (!f[field].is_array()) bad(source, fmt::format("algorithms.{}.{} must be an array", key, field));
  for (const json& pt : f[field]) {
    if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number() || !(pt[0].get<double>() >= 1) ||
        !(pt[1].get<double>() > 0) || !(pt[1].get<double>() < 1e6)) {
      bad(source, fmt::format("algorithms.{}.{}: each point is [bytes >= 1, seconds > 0]", key, field));
    }
    out.emplace_back(pt[0].get<double>(), pt[1].get<double>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Tuning parse_tuning(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(source, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object() || !j.contains("chorus_tuning") || j["chorus_tuning"] != 1) {
    bad(source, "not a chorus tuning file (expected \"chorus_tuning\": 1)");
  }
  Tuning t;
  t.source = source;
  if (!j.contains("transports") || !j["transports"].is_object()) bad(source, "missing object 'transports'");
  for (auto& [name, entries] : j["transports"].items()) {
    if (!entries.is_array()) bad(source, fmt::format("transports.{} must be an array", name));
    for (const json& e : entries) {
      if (!e.is_object()) bad(source, fmt::format("transports.{} entries must be objects", name));
      LinkEntry le;
      if (!e.contains("world_size") || !e["world_size"].is_number_integer() || e["world_size"].get<int>() < 1) {
        bad(source, fmt::format("transports.{}: each entry needs an integer world_size >= 1", name));
      }
      le.world_size = e["world_size"].get<int>();
      if (e.contains("ranks_per_core")) le.ranks_per_core = number(e, "ranks_per_core", source, 0, 1e6);
      if (e.contains("copy_gbps")) le.copy_gbps = number(e, "copy_gbps", source, 0, 1e6);
      if (e.contains("table_runs")) le.table_runs = static_cast<int>(number(e, "table_runs", source, 0, 1e6));
      le.link.alpha = number(e, "alpha_us", source, 0, 1e6) * 1e-6;
      le.link.overhead = number(e, "overhead_us", source, 0, 1e6) * 1e-6;
      le.link.beta = number(e, "beta_ns_per_byte", source, 0, 1e6) * 1e-9;
      le.link.gamma = number(e, "gamma_ns_per_byte", source, 0, 1e6) * 1e-9;
      if (e.contains("algorithms")) {
        if (!e["algorithms"].is_object()) bad(source, "'algorithms' must be an object");
        for (auto& [key, f] : e["algorithms"].items()) {
          if (!f.is_object()) bad(source, fmt::format("algorithms.{} must be an object", key));
          algo::Calibration c;
          c.latency = number(f, "latency", source, 0, 1e6);
          c.bandwidth = number(f, "bandwidth", source, 0, 1e6);
          if (f.contains("corrections")) {
            if (!f["corrections"].is_array()) bad(source, fmt::format("algorithms.{}.corrections must be an array", key));
            for (const json& pt : f["corrections"]) {
              if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number() ||
                  pt[0].get<double>() < 1 || !(pt[1].get<double>() > 0) || pt[1].get<double>() > 1e6) {
                bad(source, fmt::format("algorithms.{}.corrections: each point is [bytes >= 1, ratio > 0]", key));
              }
              c.corrections.emplace_back(pt[0].get<double>(), pt[1].get<double>());
            }
            std::sort(c.corrections.begin(), c.corrections.end());
          }
          c.measured = times(f, key, "measured", source);
          c.registered = times(f, key, "registered", source);
          c.registered_in_place = times(f, key, "registered_in_place", source);
          le.algorithms[key] = c;
        }
      }
      t.transports[name].push_back(le);
    }
  }
  return t;
}

Tuning load_tuning_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) bad(path, "cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_tuning(ss.str(), path);
}

std::string tuning_to_json(const Tuning& tuning) {
  json j;
  j["chorus_tuning"] = 1;
  json ts = json::object();
  for (const auto& [name, entries] : tuning.transports) {
    json arr = json::array();
    for (const LinkEntry& e : entries) {
      json algos = json::object();
      for (const auto& [key, c] : e.algorithms) {
        json corr = json::array();
        for (const auto& [bytes, ratio] : c.corrections) corr.push_back({bytes, ratio});
        algos[key] = {{"latency", c.latency}, {"bandwidth", c.bandwidth}, {"corrections", corr}};
        using Table = std::pair<const char*, const std::vector<std::pair<double, double>>*>;
        for (const auto& [name, table] : {Table{"measured", &c.measured}, Table{"registered", &c.registered},
                                          Table{"registered_in_place", &c.registered_in_place}}) {
          if (table->empty()) continue;
          json points = json::array();
          for (const auto& [bytes, seconds] : *table) points.push_back({bytes, seconds});
          algos[key][name] = points;
        }
      }
      json entry = {{"world_size", e.world_size},
                    {"alpha_us", e.link.alpha * 1e6},
                    {"overhead_us", e.link.overhead * 1e6},
                    {"beta_ns_per_byte", e.link.beta * 1e9},
                    {"gamma_ns_per_byte", e.link.gamma * 1e9},
                    {"algorithms", algos}};
      if (e.ranks_per_core > 0) entry["ranks_per_core"] = e.ranks_per_core;
      if (e.copy_gbps > 0) entry["copy_gbps"] = e.copy_gbps;
      if (e.table_runs > 0) entry["table_runs"] = e.table_runs;
      arr.push_back(entry);
    }
    ts[name] = arr;
  }
  j["transports"] = ts;
  return j.dump(2) + "\n";
}

namespace {
// The tuning entry_for draws `transport` from: the file where it has the transport, else the built-in one.
const Tuning& source_for(const Tuning* tuning, std::string_view transport) {
  if (tuning) {
    auto it = tuning->transports.find(std::string(transport));
    if (it != tuning->transports.end() && !it->second.empty()) return *tuning;
  }
  return builtin_tuning();
}

// Whether `e` is a better choice than `best` (null: any is): nearer in world size; as near, the smaller world
// size (6 ranks between entries for 4 and 8); of one world size, measured on a host nearer in copy rate. Ties
// keep the earlier entry. Copy rates are compared only within a world size, as has_host_kinds counts kinds, so
// the choice changes with the copy rate only at the lines copy_rate_settles_at knows.
bool better(const LinkEntry& e, const LinkEntry* best, int world_size, double copy_gbps) {
  if (!best) return true;
  const int d = std::abs(e.world_size - world_size), bd = std::abs(best->world_size - world_size);
  if (d != bd) return d < bd;
  if (e.world_size != best->world_size) return e.world_size < best->world_size;
  return host_distance(e.copy_gbps, copy_gbps) < host_distance(best->copy_gbps, copy_gbps);
}

const LinkEntry* nearest(const Tuning& t, std::string_view transport, int world_size, double copy_gbps) {
  auto it = t.transports.find(std::string(transport));
  if (it == t.transports.end() || it->second.empty()) return nullptr;
  const LinkEntry* best = nullptr;
  for (const LinkEntry& e : it->second) {
    if (better(e, best, world_size, copy_gbps)) best = &e;
  }
  return best;
}

}  // namespace

double host_distance(double measured, double here) {
  if (measured <= 0 || here <= 0) return 0;
  return std::abs(std::log(measured / here));
}

bool has_host_kinds(const Tuning& t) {
  for (const auto& [name, entries] : t.transports) {
    for (const LinkEntry& a : entries) {
      for (const LinkEntry& b : entries) {
        if (a.world_size == b.world_size && host_distance(a.copy_gbps, b.copy_gbps) > 0) return true;
      }
    }
  }
  return false;
}

double copy_rate_settles_at(const Tuning* tuning) {
  std::set<std::string> transports;
  for (const Tuning* t : {tuning, &builtin_tuning()}) {
    if (!t) continue;
    for (const auto& [name, entries] : t->transports) transports.insert(name);
  }
  double line = 0;
  for (const std::string& name : transports) {
    // The entries entry_for and interpolate_measured draw this transport's from.
    const Tuning& source = source_for(tuning, name);
    auto it = source.transports.find(name);
    if (it == source.transports.end()) continue;
    std::map<int, std::set<double>> rates;  // world size -> its entries' copy rates
    for (const LinkEntry& e : it->second) {
      if (e.copy_gbps > 0) rates[e.world_size].insert(e.copy_gbps);
    }
    for (const auto& [world, r] : rates) {
      if (r.size() < 2) continue;
      // Nearest by ratio: between the two fastest kinds the line is their geometric mean, and above it the
      // fastest kind is the nearest whatever the copy rate.
      const double top = *r.rbegin(), next = *std::next(r.rbegin());
      line = std::max(line, std::sqrt(top * next));
    }
  }
  return line;
}

bool distinguishes_hosts(const Tuning* tuning) {
  static const bool builtin = has_host_kinds(builtin_tuning());
  return builtin || (tuning && has_host_kinds(*tuning));
}

const LinkEntry& entry_for(const Tuning* tuning, std::string_view transport, int world_size, double copy_gbps) {
  if (tuning) {
    if (const LinkEntry* e = nearest(*tuning, transport, world_size, copy_gbps)) return *e;
  }
  if (const LinkEntry* e = nearest(builtin_tuning(), transport, world_size, copy_gbps)) return *e;
  static const LinkEntry generic;
  return generic;
}

std::vector<algo::Calibration> calibration_for(const LinkEntry& entry, algo::Collective c) {
  std::vector<algo::Calibration> out;
  for (const algo::Algorithm& a : algo::algorithms_for(c)) {
    auto it = entry.algorithms.find(fmt::format("{}/{}", algo::collective_name(c), a.name));
    out.push_back(it == entry.algorithms.end() ? algo::Calibration{} : it->second);
  }
  return out;
}

bool same_core_regime(double measured, double here) {
  if (measured <= 0 || here <= 0) return true;
  return (measured > 1) == (here > 1);
}

double use_registered(std::vector<algo::Calibration>& cal, bool in_place) {
  double smallest = 0;
  for (algo::Calibration& c : cal) {
    const auto& table = in_place ? c.registered_in_place : c.registered;
    if (table.empty()) continue;
    const double from = table.front().first;
    std::erase_if(c.measured, [from](const std::pair<double, double>& pt) { return pt.first >= from; });
    c.measured.insert(c.measured.end(), table.begin(), table.end());
    smallest = smallest > 0 ? std::min(smallest, from) : from;
  }
  return smallest;
}

int interpolate_measured(const Tuning* tuning, std::string_view transport, int world_size, algo::Collective c,
                         std::vector<algo::Calibration>& cal, int* below, int* above, double ranks_per_core,
                         double copy_gbps) {
  *below = *above = 0;
  const Tuning& src = source_for(tuning, transport);
  auto it = src.transports.find(std::string(transport));
  if (it == src.transports.end()) return 0;
  const LinkEntry* lo = nullptr;
  const LinkEntry* hi = nullptr;
  for (const LinkEntry& e : it->second) {
    if (e.world_size == world_size) return 0;  // measured itself: nothing to interpolate
    // The nearest world size on either side; of several entries for it, the nearest kind of host.
    if (e.world_size < world_size && better(e, lo, world_size, copy_gbps)) lo = &e;
    if (e.world_size > world_size && better(e, hi, world_size, copy_gbps)) hi = &e;
  }
  if (!lo || !hi) return 0;  // outside the measured world sizes: no extrapolation
  if (!same_core_regime(lo->ranks_per_core, ranks_per_core) || !same_core_regime(hi->ranks_per_core, ranks_per_core)) {
    return 0;  // measured with the ranks taking turns on the cores (or not), unlike this host
  }
  const double w = (std::log(world_size) - std::log(lo->world_size)) / (std::log(hi->world_size) - std::log(lo->world_size));
  const std::vector<algo::Calibration> a = calibration_for(*lo, c), b = calibration_for(*hi, c);
  int filled = 0;
  for (size_t i = 0; i < cal.size() && i < a.size() && i < b.size(); ++i) {
    if (a[i].measured.empty() || b[i].measured.empty()) continue;
    // The byte counts of either table that the other covers too.
    std::vector<double> points;
    for (const auto* t : {&a[i], &b[i]}) {
      for (const auto& [bytes, seconds] : t->measured) points.push_back(bytes);
    }
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    std::vector<std::pair<double, double>> table;
    for (double bytes : points) {
      const double ta = a[i].measured_time(bytes), tb = b[i].measured_time(bytes);
      if (ta <= 0 || tb <= 0) continue;
      table.emplace_back(bytes, std::exp((1 - w) * std::log(ta) + w * std::log(tb)));
    }
    if (table.empty()) continue;
    cal[i].measured = std::move(table);
    ++filled;
  }
  if (filled > 0) {
    *below = lo->world_size;
    *above = hi->world_size;
  }
  return filled;
}

void smooth_tables(std::vector<std::vector<std::pair<double, double>>>& tables, double weight) {
  if (weight <= 0) return;
  std::map<double, double> best;  // the fastest time at each size
  for (const auto& t : tables) {
    for (const auto& [bytes, seconds] : t) {
      auto [it, fresh] = best.emplace(bytes, seconds);
      if (!fresh) it->second = std::min(it->second, seconds);
    }
  }
  for (auto& t : tables) {
    std::map<double, double> log_ratio;
    for (const auto& [bytes, seconds] : t) log_ratio[bytes] = std::log(seconds / best.at(bytes));
    for (auto& [bytes, seconds] : t) {
      double total = log_ratio.at(bytes), weights = 1;
      for (double other : {bytes / 2, bytes * 2}) {
        auto it = log_ratio.find(other);
        if (it == log_ratio.end()) continue;
        total += weight * it->second;
        weights += weight;
      }
      seconds = best.at(bytes) * std::exp(total / weights);
    }
  }
}

}  // namespace chorus::tune
