#include "overlap/bucketing.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace chorus::overlap {

std::vector<BucketInfo> assign_buckets(std::span<const ParamShape> params, size_t first_cap, size_t cap,
                                       bool largest_first) {
  std::vector<size_t> order(params.size());
  std::iota(order.rbegin(), order.rend(), size_t{0});  // n-1, ..., 1, 0
  if (largest_first) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return params[a].bytes > params[b].bytes; });
  }

  struct Open {
    BucketInfo info;
    size_t cap = 0;
    size_t started = 0;  // position in `order` of its first parameter
  };
  struct Closed {
    BucketInfo info;
    size_t started = 0;
  };
  std::map<DataType, Open> open;
  std::map<DataType, size_t> made;  // buckets started per dtype
  std::vector<Closed> closed;
  auto close = [&](DataType t) {
    auto it = open.find(t);
    closed.push_back({std::move(it->second.info), it->second.started});
    open.erase(it);
  };

  for (size_t pos = 0; pos < order.size(); ++pos) {
    size_t i = order[pos];
    const ParamShape& p = params[i];
    auto it = open.find(p.type);
    if (it != open.end() && it->second.info.bytes + p.bytes > it->second.cap) {
      close(p.type);
      it = open.end();
    }
    if (it == open.end()) {
      Open o;
      o.info.dtype = p.type;
      o.cap = made[p.type]++ == 0 ? first_cap : cap;
      o.started = pos;
      it = open.emplace(p.type, std::move(o)).first;
    }
    it->second.info.parameters.push_back(i);
    it->second.info.bytes += p.bytes;
    if (it->second.info.bytes >= it->second.cap) close(p.type);
  }
  while (!open.empty()) close(open.begin()->first);

  if (largest_first) {
    std::sort(closed.begin(), closed.end(), [](const Closed& a, const Closed& b) { return a.started < b.started; });
  } else {
    // Parameters were added in descending index order, so a bucket's last one is its lowest.
    std::sort(closed.begin(), closed.end(),
              [](const Closed& a, const Closed& b) { return a.info.parameters.back() > b.info.parameters.back(); });
  }
  std::vector<BucketInfo> out;
  out.reserve(closed.size());
  for (Closed& c : closed) out.push_back(std::move(c.info));
  return out;
}

std::vector<Unit> make_units(const std::vector<BucketInfo>& buckets, std::span<const ParamShape> params,
                             std::span<const size_t> offsets, size_t partition_bytes) {
  std::vector<Unit> units;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const BucketInfo& bucket = buckets[b];
    size_t elem = std::max<size_t>(dtype_size(bucket.dtype), 1);
    size_t piece = bucket.bytes;
    if (partition_bytes > 0 && partition_bytes < bucket.bytes)
      piece = std::max(partition_bytes / elem, size_t{1}) * elem;
    size_t first = units.size();
    size_t off = 0;
    do {
      Unit u;
      u.bucket = b;
      u.offset = off;
      u.bytes = std::min(piece, bucket.bytes - off);
      units.push_back(std::move(u));
      off += piece;
    } while (off < bucket.bytes);

    for (size_t i : bucket.parameters) {
      size_t begin = offsets[i], end = offsets[i] + params[i].bytes;
      for (size_t k = first; k < units.size(); ++k) {
        Unit& u = units[k];
        bool overlaps = begin < u.offset + u.bytes && u.offset < end;
        // A zero-byte parameter belongs to the unit its offset falls in (the last one at the bucket's end).
        bool holds_empty = begin == end && begin >= u.offset && (begin < u.offset + u.bytes || k + 1 == units.size());
        if (overlaps || holds_empty) {
          u.parameters.push_back(i);
          if (holds_empty) break;
        }
      }
    }
    for (size_t k = first; k < units.size(); ++k) {
      Unit& u = units[k];
      u.lowest_param = u.parameters.empty() ? SIZE_MAX : *std::min_element(u.parameters.begin(), u.parameters.end());
    }
  }
  return units;
}

}  // namespace chorus::overlap
