#include "runtime/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <vector>

#include "runtime/autograd/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/core/nvtx.h"
#include "runtime/ops/elementwise.h"

namespace dp {

namespace {

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// NOTE [ Gradient homes ]: offers node input i's leaf home when node's gradient will be the
// leaf's only one in this backward — its edge is the last one left into the leaf's
// AccumulateGrad (a node with two edges into one leaf counts two) and no other gradient has
// arrived there — and the leaf's .grad is unset.
void offer_gradient_homes(Node& node, const std::unordered_map<Node*, int>& dependencies,
                          const std::unordered_map<Node*, Tensor>& grads) {
  for (size_t i = 0; i < node.next.size(); ++i) {
    Node* next = node.next[i].get();
    auto* accumulate = dynamic_cast<AccumulateGrad*>(next);
    if (accumulate == nullptr || dependencies.at(next) != 1 || grads.count(next) != 0) continue;
    Tensor home = accumulate->first_gradient_home();
    if (!home.defined()) continue;
    if (node.offered.empty()) node.offered.resize(node.next.size());
    node.offered[i] = std::move(home);
  }
}

// NOTE [ Summing into a pending gradient ]: offers node input i the gradient already waiting at
// its next node when nothing but the engine holds it (a gradient the engine handed to two nodes,
// such as add's, is shared and not offered until one of them has run).
void offer_pending_sums(Node& node, const std::unordered_map<Node*, Tensor>& grads) {
  for (size_t i = 0; i < node.next.size(); ++i) {
    auto it = node.next[i] ? grads.find(node.next[i].get()) : grads.end();
    if (it == grads.end() || !is_sole_owner(it->second)) continue;
    if (node.pending.empty()) node.pending.resize(node.next.size());
    node.pending[i] = it->second;
  }
}

}  // namespace

BackwardStats run_backward(const Tensor& root, const Tensor& grad_root, const BackwardOptions& options) {
  DP_CHECK(root.requires_grad(), "backward: the tensor does not require grad (no parameter or "
           "input with requires_grad contributed to it)");
  std::shared_ptr<Node> root_node = gradient_edge(root);

  // Count, for every node reachable from the root, how many edges point at it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{root_node.get()};
  dependencies[root_node.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& next : n->next) {
      if (!next) continue;
      auto [it, inserted] = dependencies.try_emplace(next.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(next.get());
    }
  }

  NoGradGuard no_grad;  // backward computations are not themselves recorded
  // Gradients follow the dtypes the forward chose (NOTE [ Autocast policy ]): no casting here.
  AutocastGuard no_autocast(kFloat32);
  std::unordered_map<Node*, Tensor> grads;
  grads[root_node.get()] = grad_root;
  BackwardStats stats;
  // Keep nodes alive while we run them, even if a backward releases the last owner.
  std::vector<std::shared_ptr<Node>> keep{root_node};
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  ready.push(root_node.get());

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    Tensor grad_out = std::move(grads[node]);
    grads.erase(node);
    std::vector<Tensor> input_grads;
    if (grad_out.defined()) {
      offer_gradient_homes(*node, dependencies, grads);
      if (options.sum_in_place) offer_pending_sums(*node, grads);
    }
    if (grad_out.defined() || dynamic_cast<AccumulateGrad*>(node)) {
      const nvtx::ScopedRange range(node->name(), node->module());  // "conv2d [layer1.0.conv1]" (NOTE [ NVTX ranges ])
      input_grads = node->backward(grad_out);
    }
    node->offered.clear();
    const std::vector<Tensor> pending = std::move(node->pending);
    node->pending.clear();
    node->release();
    for (size_t i = 0; i < node->next.size(); ++i) {
      Node* next = node->next[i].get();
      if (!next) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        Tensor& slot = grads[next];
        if (!slot.defined()) {
          slot = std::move(input_grads[i]);
        } else if (i < pending.size() && slot.same(pending[i]) && slot.same(input_grads[i])) {
          // the op summed its gradient into the pending one (not: an op that returned one
          // tensor for two edges into this node, as add(x, x) does — that is a sum to make)
          ++stats.sums_in_place;
        } else {
          slot = add(slot, input_grads[i]);
          ++stats.sums;
        }
      }
      if (--dependencies[next] == 0) {
        keep.push_back(node->next[i]);
        ready.push(next);
      }
    }
    // The graph is single-use: drop edges so memory is freed as backward proceeds.
    node->next.clear();
  }
  return stats;
}

}  // namespace dp
