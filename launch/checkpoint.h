// Checkpoints on disk: one directory per save, complete or absent.
//
// NOTE [ Checkpoint layout ]
// <run.output_dir>/checkpoints/step_<00000000N>/ holds
//   model.safetensors   every parameter and buffer with torch's names, a tied one once (as
//                       Hugging Face's files: without_tied_duplicates in runtime/nn/module.h);
//                       model.init_from reads it as it is, torchvision too;
//   state.safetensors   everything else a run needs to continue, as named tensors: the
//                       optimiser's state_dict() under "optimizer.", the loss scaler's under
//                       "scaler.", the schedule clock's under "clock." (the trainer decides);
//   checkpoint.json     the manifest, written last: format version, dptrain version, the
//                       position (step, epoch, step in epoch), the world size, a hash of the
//                       config, free-form facts, each file's size and FNV-1a 64 digest, and
//                       the manifest's own digest (of its JSON without that entry; manifests
//                       without one, from before it, are read with their entries range-checked).
// A save writes all of it into "step_<N>.tmp.<pid>", fsyncs every file and the directory,
// renames the directory into place and fsyncs the parent: a reader (and `--resume auto`, which
// takes the newest step_* directory) never sees half a checkpoint, and a crash or a full disk
// during a save leaves the earlier checkpoints as they were. Loading checks the manifest's
// version and own digest, then every file's size and digest, before parsing anything: a truncated,
// bit-flipped, edited, wrong-version or foreign directory is refused naming the file and the problem.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "runtime/io/tensor_file.h"

namespace dp {

inline constexpr int64_t kCheckpointFormatVersion = 1;

struct CheckpointPosition {
  int64_t step = 0;           // optimiser steps done
  int64_t epoch = 0;          // 0-based epoch the next step belongs to
  int64_t step_in_epoch = 0;  // steps of that epoch already done
  // Samples (sequences for text) trained over all ranks since the start; -1: unknown (a
  // checkpoint written before dptrain counted them; only run.eval_every_samples needs it).
  int64_t samples = 0;
  // The epoch's training loss so far, for its report: each rank's loss summed over the epoch's
  // step_in_epoch steps, averaged over the ranks; NaN: not known (a checkpoint from before dptrain
  // kept it; the resumed epoch then reports the mean over the steps it ran).
  double epoch_loss_sum = std::numeric_limits<double>::quiet_NaN();
};

struct Checkpoint {
  CheckpointPosition position;
  int world_size = 1;
  uint64_t config_hash = 0;  // of the settings a resumed run must share (the trainer decides which)
  std::map<std::string, std::string> facts;  // free-form, e.g. the model's name (kept in the manifest)
  NamedTensorList model;  // model.safetensors
  NamedTensorList state;  // state.safetensors
  // model.safetensors' own metadata (its model's digest: the file stays checkable when it is used
  // alone, as model.init_from or `dptrain evaluate --weights`; its training classes).
  std::map<std::string, std::string> model_metadata;
};

// Writes `checkpoint` as <checkpoints_dir>/step_<N> (N = position.step, zero-padded to 9
// digits), atomically (NOTE [ Checkpoint layout ]); creates checkpoints_dir when missing. An
// existing step_<N> is an error (nothing a user made is replaced). Returns the directory.
std::string save_checkpoint(const std::string& checkpoints_dir, const Checkpoint& checkpoint);

// The complete checkpoint directories under checkpoints_dir (step_<digits>, temporaries and
// anything else ignored), oldest first by step; empty when there is none or no such directory.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// Reads and verifies one checkpoint directory; tensors land on `device`. dp::Error naming the
// file and the problem otherwise.
Checkpoint load_checkpoint(const std::string& dir, Device device);

// Removes the temporaries of saves that never completed (a process killed while saving:
// "step_<N>.tmp.<pid>"); returns them. Only while no other process saves into the directory.
std::vector<std::string> remove_unfinished_saves(const std::string& checkpoints_dir);

// Removes all but the newest `keep` complete checkpoints (keep >= 1); returns those removed.
std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int64_t keep);

}  // namespace dp
