// How the Reducer lays gradients out: parameters into buckets, buckets into scheduling units.
// Pure functions of the registered shapes, so every rank computes the same layout.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "chorus/reducer.h"
#include "chorus/types.h"

namespace chorus::overlap {

struct ParamShape {
  size_t bytes = 0;
  DataType type = DataType::Float32;
};

// Reverse registration order (largest_first = false), or by size, largest first, ties in reverse
// registration order (largest_first = true). Each dtype fills its own open bucket; a dtype's first bucket is
// capped at first_cap, its later ones at cap. A parameter that does not fit closes the open bucket and starts
// the next; one larger than the cap gets a bucket of its own. Parameters sit in the order they were added.
//
// Bucket order: without largest_first, the order in which a backward pass (marking parameters in reverse
// registration order) completes the buckets, i.e. by lowest parameter index, descending; with one dtype this
// is the order the buckets were filled in. With largest_first, the order the buckets were started in.
std::vector<BucketInfo> assign_buckets(std::span<const ParamShape> params, size_t first_cap, size_t cap,
                                       bool largest_first);

// A contiguous byte range of one bucket that is all-reduced as one operation.
struct Unit {
  size_t bucket = 0;
  size_t offset = 0;  // bytes into the bucket
  size_t bytes = 0;
  size_t lowest_param = 0;         // the lowest parameter index with bytes in this unit (FrontFirst's key)
  std::vector<size_t> parameters;  // the parameters that must be ready before this unit can go
};

// Whole buckets (partition_bytes == 0), or each bucket cut into pieces of at most partition_bytes (rounded
// down to whole elements, at least one element). A zero-byte bucket is one zero-byte unit. `offsets[i]` is
// parameter i's byte offset inside its bucket.
std::vector<Unit> make_units(const std::vector<BucketInfo>& buckets, std::span<const ParamShape> params,
                             std::span<const size_t> offsets, size_t partition_bytes);

}  // namespace chorus::overlap
