// `dptrain evaluate --config RECIPE (--weights FILE | --checkpoint DIR|auto)`: the recipe's
// evaluation set through given weights, nothing trained and nothing written.
//
// NOTE [ Evaluating weights ]
// The run is built from the recipe as training would build it (build_run: the same datasets,
// evaluation transforms, model, device, precision, channels-last choice, ranks), the weights are
// loaded into its model, and evaluate() — the very function training calls after each epoch —
// runs once. So a model's accuracy here is the accuracy its training reported, digit for digit
// (tested), and weights from elsewhere (torchvision's names load: NOTE [ Module names ] in
// runtime/nn/module.h) are measured through dptrain's own input pipeline.
// - --weights FILE: a safetensors file (run.weights_file of a run, torchvision's or Hugging
//   Face's exported weights); loaded strictly, and a file dptrain wrote must still have the model
//   digest it records (load_model_weights in launch/training_run.h).
// - --checkpoint DIR: a checkpoint directory (its digests verified: launch/checkpoint.h); auto:
//   the newest complete one under run.output_dir/checkpoints. Only the model is taken from it, so
//   the number of ranks and the rest of the recipe may differ from the run that saved it.
// - Neither: model.init_from of the recipe, if set.
// The labels must mean what they meant in training: weights dptrain wrote record the training
// set's class names (model_file_metadata in launch/training_run.h), and an evaluation set whose
// names differ is refused (check_weights_classes). So an image folder needs no train/ here: a
// validation folder alone (data.root/val or data.eval_root) gives the classes from its own class
// folders (DataUse::EvaluationOnly, launch/datasets.h), checked against the recorded ones where the
// file has them, and said in the output.
// Over several ranks each evaluates its shard (the sums are added, as in training) after the
// model is broadcast from rank 0, whose file is the one named in the output. What shapes only
// training does not constrain the evaluation: data.batch_size need not divide by the ranks (it
// is rounded up for the unused training loader), distributed.shards and run.cuda_graphs are off,
// and a text run's pre-allocation pass (a training step's forward and backward) is not made. The result is one
// line (or with --json one JSON object) on rank 0's standard output; nothing is written to
// run.output_dir, so evaluating never moves an earlier run's files aside.
#pragma once

#include <string>

#include "launch/config.h"
#include "launch/console.h"
#include "launch/datasets.h"
#include "launch/training_run.h"
#include "runtime/core/runtime.h"

namespace dp {

struct EvaluateArgs {
  std::string weights;     // a safetensors file; empty: none
  std::string checkpoint;  // a checkpoint directory or "auto"; empty: none
  bool json = false;       // the result as one JSON object instead of a sentence
};

struct EvaluateReport {
  std::string source;  // what was evaluated: the file, the checkpoint directory
  uint64_t model_digest = 0;
  Evaluation evaluation;
  int64_t eval_samples = 0;  // the evaluation set's size (sequences for text)
  double seconds = 0;        // the evaluation alone, loading excluded
  FileReport files;          // test files skipped or damaged, over all ranks (launch/datasets.h)
};

// Builds the run, loads the weights, evaluates; prints the result on `console` (rank 0's; with
// args.json one JSON line on `json_out` instead, when not null). Throws dp::Error naming the
// option or key at fault.
EvaluateReport run_evaluate(const Config& config, Runtime& runtime, Console& console, std::FILE* json_out,
                            const RunWorld& world, const EvaluateArgs& args);

}  // namespace dp
