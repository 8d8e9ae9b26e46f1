// A collective's (sequence, fingerprint) as fixed-layout bytes, for exchanging between ranks as
// MPI_BYTE (every rank of a job runs the same build on the same architecture).
#pragma once

#include <cstdint>

#include "comm/collective_log.h"

namespace dp {

struct WireFingerprint {
  uint64_t sequence;
  int64_t count;
  int64_t tag;
  int32_t root;
  uint8_t op, reduce, dtype, unused;

  static WireFingerprint from(uint64_t sequence, const CollectiveFingerprint& fp) {
    return {sequence, fp.count, fp.tag, fp.root, static_cast<uint8_t>(fp.op),
            static_cast<uint8_t>(fp.reduce), static_cast<uint8_t>(fp.dtype), 0};
  }
  CollectiveFingerprint fingerprint() const {
    return {static_cast<CollectiveOp>(op), static_cast<CollectiveReduce>(reduce),
            static_cast<DType>(dtype), count, root, tag};
  }
};

}  // namespace dp
