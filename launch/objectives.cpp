#include "launch/objectives.h"

#include "models/bert.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"
#include "runtime/text/mlm_dataset.h"

namespace dp {

Tensor ClassificationObjective::training_loss(nn::Module& model, const Batch& batch) const {
  // uint8 → normalised on the device, in the run's memory format
  const Tensor logits = model.forward(train_.model_input(batch[kImages], input_format_));
  return cross_entropy(logits, batch[kLabels], Reduction::Mean, -100, label_smoothing_);  // float32 (autocast)
}

EvalSums ClassificationObjective::eval_sums(nn::Module& model, const Batch& batch) const {
  const Tensor logits = model.forward(eval_.model_input(batch[kImages], input_format_));
  const Tensor& labels = batch[kLabels];
  Tensor loss = cross_entropy(logits, labels, Reduction::Sum).to(kFloat64);
  Tensor hits = equal(argmax(logits, -1).to(kFloat32), labels.to(kFloat32));
  EvalSums sums{loss, sum(hits).to(kFloat64), full({}, static_cast<double>(batch.size()), kFloat64, logits.device()),
                Tensor()};
  // NOTE [ Top-5 accuracy ]
  if (top5_) sums.correct_top5 = sum(topk_hits(logits, labels, 5)).to(kFloat64);
  return sums;
}

namespace {

BertForPreTraining& as_bert(nn::Module& model) {
  auto* bert = dynamic_cast<BertForPreTraining*>(&model);
  DP_CHECK(bert != nullptr, "the masked-LM objective needs model.name: bert");
  return *bert;
}

}  // namespace

Tensor MaskedLmObjective::mlm_logits(BertForPreTraining& model, const Batch& batch) const {
  const Tensor& ids = batch[text::kInputIds];
  const int64_t rows = ids.size(0), length = ids.size(1);
  BertInputs in;
  in.input_ids = ids;
  in.token_type_ids = batch[text::kTokenTypeIds];
  in.position_ids = batch[text::kPositionIds];
  const Tensor& sequence_ids = batch[text::kSequenceIds];
  // Packed rows: a token sees only its own sequence; otherwise only the padding is hidden.
  in.attention_mask = packed_ ? packed_attention_mask(sequence_ids) : padding_attention_mask(sequence_ids);
  const Tensor hidden = model.bert->encode(in);  // [rows, length, H]
  const Tensor flat = hidden.reshape({rows * length, hidden.size(2)});
  const Tensor picked = embedding(batch[text::kMlmPositions].flatten(), flat);  // [rows x slots, H]
  return model.mlm_logits(picked);
}

Tensor MaskedLmObjective::training_loss(nn::Module& model, const Batch& batch) const {
  const Tensor logits = mlm_logits(as_bert(model), batch);
  const Tensor per_slot = cross_entropy(logits, batch[text::kMlmLabels].flatten(), Reduction::None);  // 0 if unused
  const Tensor loss = sum(mul(per_slot.to(kFloat32), batch[text::kMlmWeights].flatten()));
  return world_size_ == 1 ? loss : mul(loss, static_cast<double>(world_size_));
}

EvalSums MaskedLmObjective::eval_sums(nn::Module& model, const Batch& batch) const {
  const Tensor logits = mlm_logits(as_bert(model), batch);
  const Tensor labels = batch[text::kMlmLabels].flatten();
  Tensor loss = cross_entropy(logits, labels, Reduction::Sum).to(kFloat64);
  // An unused slot's label (-100) never equals a predicted id; its weight is 0.
  Tensor hits = equal(argmax(logits, -1).to(kFloat32), labels.to(kFloat32));
  return {loss, sum(hits).to(kFloat64), sum(batch[text::kMlmWeights]).to(kFloat64), Tensor()};
}

}  // namespace dp
