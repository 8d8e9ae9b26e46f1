// What a model is trained and evaluated on, as a function of a batch's named tensors: image
// classification (images → logits, cross-entropy against labels) and BERT's masked language
// model (NOTE [ MLM batches ] in runtime/text/mlm_dataset.h).
#pragma once

#include <cstdint>

#include "runtime/data/dataset.h"
#include "runtime/nn/module.h"

namespace dp {

class BertForPreTraining;

// Sums over an evaluation batch, float64 [] on the device (read once, after the last batch).
struct EvalSums {
  Tensor loss;     // summed over the predictions, without label smoothing
  Tensor correct;  // predictions that were right
  Tensor count;    // predictions made
  // Predictions with the label among the 5 highest logits (topk_hits); undefined where top-5 is
  // not reported (NOTE [ Top-5 accuracy ]).
  Tensor correct_top5;
};

// NOTE [ Top-5 accuracy ]
// ImageNet results are quoted as top-1 and top-5 accuracy (torchvision's reference prints Acc@1
// and Acc@5), so a classification run whose model has more than kTop5AboveClasses classes counts
// top-5 hits too, on the device beside the top-1 ones: the epoch and evaluation lines, their
// metrics records (`test_accuracy_top5`) and `dptrain evaluate` report it. With 10 classes or
// fewer five guesses say little, and it is left out. MLPerf's quality target stays top-1. Ties
// rank in class order and NaN logits first (topk_hits in runtime/ops/loss.h), so a model whose
// logits are all equal or NaN scores what it deserves, not 100 %.
inline constexpr int64_t kTop5AboveClasses = 10;

class Objective {
 public:
  virtual ~Objective() = default;
  // This rank's training loss (float32 [], on the device) such that the mean over the ranks is
  // the step's loss: the gradient all-reduce averages.
  virtual Tensor training_loss(nn::Module& model, const Batch& batch) const = 0;
  virtual EvalSums eval_sums(nn::Module& model, const Batch& batch) const = 0;
  // Whether eval_sums counts top-5 hits (NOTE [ Top-5 accuracy ]).
  virtual bool counts_top5() const { return false; }
};

class ClassificationObjective final : public Objective {
 public:
  // input_format: the memory format of the model's input (run.channels_last), which a conv
  // net's activations keep from there (NOTE [ Channels-last ]).
  // num_classes: the model's outputs (more than kTop5AboveClasses: top-5 is counted).
  ClassificationObjective(const ClassificationDataset& train, const ClassificationDataset& eval,
                          double label_smoothing, MemoryFormat input_format = MemoryFormat::Contiguous,
                          int64_t num_classes = 0)
      : train_(train), eval_(eval), label_smoothing_(label_smoothing), input_format_(input_format),
        top5_(num_classes > kTop5AboveClasses) {}
  // The mean cross-entropy over the batch.
  Tensor training_loss(nn::Module& model, const Batch& batch) const override;
  EvalSums eval_sums(nn::Module& model, const Batch& batch) const override;
  bool counts_top5() const override { return top5_; }

 private:
  const ClassificationDataset& train_;  // each split turns its own batches into model input
  const ClassificationDataset& eval_;
  double label_smoothing_;
  MemoryFormat input_format_;
  bool top5_;
};

// BERT pretraining's masked LM: the encoder over every token, the MLM head over the predicted
// positions only (gathered), cross-entropy weighted by mlm_weights: the step's mean over its
// predicted tokens on all ranks, times the world size (the all-reduce then averages).
class MaskedLmObjective final : public Objective {
 public:
  // packed: rows hold several sequences (a block-diagonal attention mask instead of padding's).
  MaskedLmObjective(bool packed, int world_size) : packed_(packed), world_size_(world_size) {}
  Tensor training_loss(nn::Module& model, const Batch& batch) const override;
  EvalSums eval_sums(nn::Module& model, const Batch& batch) const override;

  // The MLM logits [rows x slots, V] of the batch's prediction slots.
  Tensor mlm_logits(BertForPreTraining& model, const Batch& batch) const;

 private:
  bool packed_;
  int world_size_;
};

}  // namespace dp
