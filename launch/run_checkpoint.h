// A training run to and from a checkpoint (launch/checkpoint.h holds the files).
//
// NOTE [ Resuming a run ]
// A checkpoint holds what the rest of the run depends on: the model's parameters and buffers
// (rank 0's: BatchNorm statistics are made equal from rank 0 before every evaluation anyway),
// the optimiser's state_dict() (Shampoo's factors, roots and grafting state included; Shampoo
// gathers every root on every rank, so rank 0 holds all of it), the loss scaler, the schedule
// clock, run.seed's generator (Dropout), and the position: steps done, the epoch and how many of
// its steps. The epoch's sample order is a pure function of (seed, epoch) (NOTE [ Deterministic
// epochs ]), so the loader resumes by starting that epoch at the next batch; augmentation
// depends on (seed, epoch, sample) alone. A resumed deterministic run therefore ends with the
// model an uninterrupted run ends with, bit for bit.
//
// Resuming checks the run against the checkpoint first: the resolved configuration must be the
// same but for the keys that do not change what is computed (kResumeFreeKeys: paths, logging,
// loader threads, max_steps, checkpoint cadence, ...); every other difference is listed. The
// world size must be the same, unless distributed.shards is set: the shards then fix the
// computation whatever the world size (NOTE [ Fixed shards ]), and any world size dividing it
// may continue. The data must be the same: the checkpoint records each set's size and content
// digest (Dataset::content_digest: an image folder's classes and paths below its split folder,
// so the folder may move), since one file more or less changes every later epoch's order.
// The metrics records so far travel in the checkpoint too, and so does the interrupted epoch's
// loss summed so far (CheckpointPosition::epoch_loss_sum), so the resumed epoch reports the whole
// epoch's loss. What is not saved: the loss-scale skip counts, and the epoch's time (a resumed
// epoch's throughput is that of the steps it ran).
#pragma once

#include <string>

#include "launch/checkpoint.h"
#include "launch/config.h"
#include "launch/training_run.h"

namespace dp {

// The checkpoint fact holding rank 0's metrics records up to the save (written first into a
// resumed run's metrics file, so that it reads as one run).
inline constexpr const char* kMetricsFact = "metrics";

// <run.output_dir>/checkpoints.
std::string checkpoints_dir(const Config& config);

// The resolved configuration as a checkpoint records it: the keys a resumed run may change
// reset to their defaults (so they never count as a difference).
std::string resume_relevant_config(const Config& config);

// distributed.buffer_sync average keeps each rank's floating-point buffers (BatchNorm's running
// statistics) its own between evaluations, which average them: a checkpoint then keeps every
// rank's, as "rank_buffers.<r>.<name>" for r >= 1 (rank 0's are the model's), and a resumed rank
// takes its own back. Every rank calls it at the same point; rank 0 receives them, the others
// nothing. Empty for one process and for buffer_sync broadcast (rank 0's are the only ones that
// outlive the next evaluation).
NamedTensorList gather_rank_buffers(TrainingRun& run, const Config& config);

// Everything NOTE [ Resuming a run ] lists, at `position`; `rank_buffers` from gather_rank_buffers.
Checkpoint capture_checkpoint(TrainingRun& run, const Config& config, const CheckpointPosition& position,
                              const NamedTensorList& rank_buffers = {});

// Checks `checkpoint` against this run (configuration, world size, model) and loads it into
// `run`; returns the position to continue from. A dp::Error naming every difference otherwise.
CheckpointPosition restore_checkpoint(TrainingRun& run, const Config& config, const Checkpoint& checkpoint,
                                      const std::string& where);

// run.resume resolved: "" → none; "auto" → the newest complete checkpoint, or none; a path → it.
std::string checkpoint_to_resume(const Config& config);

}  // namespace dp
