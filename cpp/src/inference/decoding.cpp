#include "transformer/inference/decoding.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "transformer/core/checks.hpp"

namespace transformer {

namespace {

// The `keep` largest logits of one row of V, never the padding id `pad`, as ids best first (ties:
// the lower id first), and the row's log-sum-exp over every id but pad, so that log p(id) = logit - lse.
// Log-softmax is monotonic within a row, so these are also the `keep` most probable ids; the
// softmax itself is never materialised.
template <typename T>
double top_ids_and_lse(const T* logits, Index V, Index keep, std::vector<Index>& top, Index pad) {
  using Arr = Eigen::Array<T, 1, Eigen::Dynamic>;
  constexpr Index kChunk = 128;
  top.clear();
  T mx = -std::numeric_limits<T>::infinity();
  // ids [lo, hi) chunk by chunk: a chunk's largest logit (vectorised) is the row's maximum's
  // candidate, and only a chunk whose largest beats the keep-th best so far is looked at id by id
  const auto scan = [&](Index lo, Index hi) {
    for (Index c0 = lo; c0 < hi; c0 += kChunk) {
      const Index c1 = std::min(hi, c0 + kChunk);
      const T cmax = Eigen::Map<const Arr>(logits + c0, c1 - c0).maxCoeff();
      mx = std::max(mx, cmax);
      if (static_cast<Index>(top.size()) == keep && !(cmax > logits[top.back()])) continue;
      for (Index j = c0; j < c1; ++j) {
        if (static_cast<Index>(top.size()) == keep && !(logits[j] > logits[top.back()])) continue;
        // insert j after every id with a logit >= its own (so equal logits keep increasing ids)
        auto at =
            std::upper_bound(top.begin(), top.end(), j, [logits](Index a, Index b) { return logits[a] > logits[b]; });
        top.insert(at, j);
        if (static_cast<Index>(top.size()) > keep) top.pop_back();
      }
    }
  };
  scan(0, pad);  // the ids before pad and those after it
  scan(pad + 1, V);
  const Eigen::Map<const Arr> a(logits, pad), b(logits + pad + 1, V - pad - 1);
  const double sum = static_cast<double>((a - mx).exp().sum() + (b - mx).exp().sum());  // Eigen's vectorised exp
  return static_cast<double>(mx) + std::log(sum);
}

// start_id and end_id are ids of the target vocabulary; end_id is not padding, and start_id is
// padding only when the model's own start id is (Marian's ids: its decoder never masks position 0).
void check_special_ids(const TransformerConfig& c, std::int64_t start_id, std::int64_t end_id, const char* who) {
  TCPP_CHECK(start_id >= 0 && start_id < c.tgt_vocab_size && end_id >= 0 && end_id < c.tgt_vocab_size, who,
             ": start_id and end_id must be in [0, ", c.tgt_vocab_size, "), got ", start_id, " and ", end_id);
  TCPP_CHECK(end_id != c.pad_id, who, ": end_id must not be the padding id ", c.pad_id);
  TCPP_CHECK(start_id != c.pad_id || c.start_id == c.pad_id, who, ": start_id must not be the padding id ", c.pad_id,
             " (the model's start id is ", c.start_id, ")");
}

// The first arg max of a row of V over every id but pad.
template <typename T>
Index argmax_but(const T* row, Index V, Index pad) {
  if (pad == 0) return 1 + first_argmax(row + 1, V - 1);
  const Index before = first_argmax(row, pad);
  if (pad + 1 >= V) return before;
  const Index after = pad + 1 + first_argmax(row + pad + 1, V - pad - 1);
  return row[after] > row[before] ? after : before;
}

// Before a decode allocates anything: refuse one whose buffers cannot fit (the encoder pass over
// src; in every decoder layer the key/value caches of `rows` hypotheses for `steps` positions and
// the memory's keys and values; scores, step buffers, logits, the output ids), then weights that
// are not finite (skipped when the caller knows the weights are unchanged since the last decode
// with this workspace found them finite: the scan costs more than decoding one short sentence).
template <typename T>
void check_decode(Transformer<T>& model, ConstTokenMap src, Index rows, Index steps, const char* who,
                  const std::string& what, DecodeWorkspace<T>* workspace, bool weights_unchanged, bool record) {
  const TransformerConfig& c = model.config();
  const double B = static_cast<double>(src.rows()), S = static_cast<double>(src.cols());
  const double R = static_cast<double>(rows), n = static_cast<double>(steps), d = static_cast<double>(c.d_model);
  const double H = static_cast<double>(c.n_heads), dff = static_cast<double>(c.d_ff);
  const double L = static_cast<double>(decoder_layers(c)), V = static_cast<double>(c.tgt_vocab_size);
  const double elements = L * encoder_layer_elements(B * S, B, H, S, d, dff) + 4 * B * S * d +
                          L * (2 * R * n * d + 2 * B * S * d) + R * n * d + R * H * std::max(S, n) +
                          R * (12 * d + 2 * dff + 2 * V) + n * d;
  // recorded cross-attention: every step's weights of every row, then the outputs' own (as double)
  const double recorded = record ? L * H * R * n * S * (static_cast<double>(sizeof(T)) + 8) : 0.0;
  check_memory(who, what, elements * static_cast<double>(sizeof(T)) + B * S * S + B * n * 8 + recorded);
  if (workspace != nullptr && &workspace->model != &model) workspace = nullptr;  // refused later
  if (workspace != nullptr && weights_unchanged && workspace->finite_checked) return;
  if (workspace != nullptr) workspace->finite_checked = false;
  check_finite_parameters(model.parameters(), who);
  if (workspace != nullptr) workspace->finite_checked = true;
}

[[noreturn]] void throw_nonfinite_logits(const char* who, Index step) {
  throw NonFiniteError(concat(who, ": the logits of step ", step,
                              " are not finite: the activations overflowed "
                              "(the weights are too large); nothing was decoded"));
}

// Each sentence's output limit: DecodeExtras::max_lengths (checked: one per sentence, each in
// [1, max_length]), else max_length for all.
std::vector<Index> sentence_limits(const DecodeExtras* extras, Index B, Index max_length, const char* who) {
  if (extras == nullptr || extras->max_lengths.empty()) return std::vector<Index>(static_cast<size_t>(B), max_length);
  const std::vector<Index>& limits = extras->max_lengths;
  TCPP_CHECK(static_cast<Index>(limits.size()) == B, who, ": max_lengths has ", limits.size(), " entries for ", B,
             " sentences; give one limit per sentence (shape (", B, ",))");
  for (size_t b = 0; b < limits.size(); ++b)
    TCPP_CHECK(limits[b] >= 1 && limits[b] <= max_length, who, ": max_lengths[", b, "] is ", limits[b],
               "; each sentence's limit must be in [1, max_length = ", max_length, "]");
  return limits;
}

// Each sentence's forced prefix (DecodeExtras::prefixes), checked: one per sentence (or none),
// ids of the vocabulary other than padding and end_id, no longer than the sentence's limit.
std::vector<std::vector<std::int64_t>> sentence_prefixes(const DecodeExtras* extras, const std::vector<Index>& limits,
                                                         Index V, std::int64_t pad, std::int64_t end_id,
                                                         const char* who) {
  const size_t B = limits.size();
  if (extras == nullptr || extras->prefixes.empty()) return std::vector<std::vector<std::int64_t>>(B);
  const auto& prefixes = extras->prefixes;
  TCPP_CHECK(prefixes.size() == B, who, ": target_prefix has ", prefixes.size(), " entries for ", B,
             " sentences; give one prefix per sentence");
  for (size_t b = 0; b < B; ++b) {
    TCPP_CHECK(static_cast<Index>(prefixes[b].size()) <= limits[b], who, ": target_prefix[", b, "] has ",
               prefixes[b].size(), " tokens, more than the sentence's output limit ", limits[b]);
    for (std::int64_t id : prefixes[b])
      TCPP_CHECK(id >= 0 && id < V && id != pad && id != end_id, who, ": target_prefix[", b, "] holds id ", id,
                 "; prefix ids must be in [0, ", V, ") and neither the padding id ", pad, " nor the end id ", end_id);
  }
  return prefixes;
}

// Each sentence's constraints (DecodeExtras::constraints), checked: one list per sentence (or
// none), fewer than beam_size each, every one a non-empty sequence of ids other than padding and end_id.
std::vector<std::vector<Phrase>> sentence_constraints(const DecodeExtras* extras, Index B, Index beam_size, Index V,
                                                      std::int64_t pad, std::int64_t end_id) {
  if (extras == nullptr || extras->constraints.empty()) return std::vector<std::vector<Phrase>>(static_cast<size_t>(B));
  const auto& all = extras->constraints;
  TCPP_CHECK(static_cast<Index>(all.size()) == B, "beam_search: constraints has ", all.size(), " entries for ", B,
             " sentences; give one list of constraints per sentence");
  for (size_t b = 0; b < all.size(); ++b) {
    TCPP_CHECK(static_cast<Index>(all[b].size()) < beam_size, "beam_search: sentence ", b, " has ", all[b].size(),
               " constraints, too many for beam_size ", beam_size, "; at most beam_size - 1 = ", beam_size - 1);
    for (const Phrase& p : all[b]) {
      TCPP_CHECK(!p.empty(), "beam_search: constraint of sentence ", b, " is empty; each must hold at least one id");
      for (std::int64_t id : p)
        TCPP_CHECK(id >= 0 && id < V && id != pad && id != end_id, "beam_search: a constraint of sentence ", b,
                   " holds id ", id, "; constraint ids must be in [0, ", V, ") and neither the padding id ", pad,
                   " nor the end id ", end_id);
    }
  }
  return all;
}

// The cross-attention weights of row r in one step's record (per layer, DecoderCache::cross_weights),
// appended to `out` as (layer, head, source) for a sentence of `source` tokens.
template <typename T>
void append_step_weights(const std::vector<Matrix<T>>& step, Index r, Index heads, Index source,
                         std::vector<double>& out) {
  for (const Matrix<T>& w : step)
    for (Index h = 0; h < heads; ++h) {
      const T* row = w.data() + (r * heads + h) * w.cols();
      out.insert(out.end(), row, row + source);
    }
}

// (tokens, layers, heads, source) weights, one step after the other, as a CrossAttention
// (layers, heads, tokens, source).
CrossAttention cross_attention_of(const std::vector<double>& steps, Index tokens, Index layers, Index heads,
                                  Index source) {
  CrossAttention a{layers, heads, tokens, source, std::vector<double>(steps.size())};
  for (Index t = 0; t < tokens; ++t)
    for (Index lh = 0; lh < layers * heads; ++lh)
      std::copy_n(steps.data() + (t * layers * heads + lh) * source, source,
                  a.weights.data() + (lh * tokens + t) * source);
  return a;
}

// The cross-attention of one hypothesis, read through every step's record (`history`: per step,
// per layer) along its `path` (its decoder row at each step).
template <typename T>
CrossAttention attention_along(const std::vector<std::vector<Matrix<T>>>& history, const std::vector<Index>& path,
                               Index layers, Index heads, Index source) {
  std::vector<double> steps;
  for (size_t t = 0; t < path.size(); ++t) append_step_weights(history[t], path[t], heads, source, steps);
  return cross_attention_of(steps, static_cast<Index>(path.size()), layers, heads, source);
}

// The source tokens of sentence b (its non-padding positions).
template <typename T>
Index source_length(const InferenceState<T>& st, Index b) {
  const auto& offsets = st.decoder.memory_rows.offsets;
  return offsets[static_cast<size_t>(b + 1)] - offsets[static_cast<size_t>(b)];
}

// The caller's workspace (which must belong to this model), else a fresh one owned by `local`.
template <typename T>
DecodeWorkspace<T>& workspace_for(Transformer<T>& model, DecodeWorkspace<T>* workspace,
                                  std::unique_ptr<DecodeWorkspace<T>>& local) {
  if (workspace != nullptr) {
    TCPP_CHECK(&workspace->model == &model, "decode: the workspace belongs to another model");
    return *workspace;
  }
  local = std::make_unique<DecodeWorkspace<T>>(model);
  return *local;
}

// The workspace's backend of compute type c, begun for a decode of up to `rows` rows: prepared
// weights when they pay off (InferenceBackend::wanted), checked against the model's weights unless
// the caller knows that they did not change since this backend's prepared weights were last checked.
template <typename T>
InferenceBackend<T>& begin_backend(DecodeWorkspace<T>& ws, ComputeType c, Index rows, bool weights_unchanged) {
  if (!weights_unchanged) ++ws.weights_version;  // they may have changed since the last decode
  const int i = static_cast<int>(c);
  InferenceBackend<T>& be = ws.backends[i];
  be.begin(c, InferenceBackend<T>::wanted(c, rows), ws.checked_version[i] != ws.weights_version);
  if (be.prepared()) ws.checked_version[i] = ws.weights_version;
  return be;
}
}  // namespace

template <typename T>
TokenMatrix greedy_decode(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id, std::int64_t end_id,
                          Index max_length, DecodeWorkspace<T>* workspace, ComputeType compute, bool weights_unchanged,
                          DecodeExtras* extras) {
  const TransformerConfig& c = model.config();
  check_compute_type<T>(compute, "greedy_decode");
  check_special_ids(c, start_id, end_id, "greedy_decode");
  TCPP_CHECK(max_length >= 1, "greedy_decode: max_length must be >= 1, got ", max_length);
  const Index steps = max_length;
  const Index B = src.rows();
  const std::vector<Index> limits = sentence_limits(extras, B, max_length, "greedy_decode");
  const auto prefixes = sentence_prefixes(extras, limits, c.tgt_vocab_size, c.pad_id, end_id, "greedy_decode");
  const SamplingOptions sampling = extras != nullptr ? extras->sampling : SamplingOptions{};
  check_sampling(sampling, "greedy_decode");
  const bool record = extras != nullptr && extras->record_attention;
  if (extras != nullptr) extras->attention.clear();
  if (B == 0) return TokenMatrix::Constant(0, 1, c.pad_id);
  check_decode(model, src, B, steps, "greedy_decode",
               concat("max_length ", max_length, " for ", B, " sentences of source length ", src.cols()), workspace,
               weights_unchanged, record);
  TokenMatrix out = TokenMatrix::Constant(B, steps, c.pad_id);
  std::unique_ptr<DecodeWorkspace<T>> local;
  DecodeWorkspace<T>& ws = workspace_for(model, workspace, local);
  InferenceBackend<T>& be = begin_backend(ws, compute, B, weights_unchanged);
  InferenceState<T>& st = ws.state;
  model.infer_start(src, steps, be, st);
  st.decoder.record_cross = record;
  // with record: per sentence, its steps' weights (tokens, layers, heads, source) and its token count
  std::vector<std::vector<double>> recorded(record ? static_cast<size_t>(B) : 0);
  std::vector<Index> emitted(static_cast<size_t>(B), 0);
  std::vector<std::int64_t> tokens(static_cast<size_t>(B), start_id);
  std::vector<std::int64_t> next;
  std::vector<Index> keep;
  const Index V = c.tgt_vocab_size;
  for (Index t = 0; t < steps && st.rows() > 0; ++t) {
    const Matrix<T>& logits = model.infer_step(tokens.data(), be, st);  // (R, V)
    const Index R = st.rows();
    next.resize(static_cast<size_t>(R));
    int bad = 0;
#pragma omp parallel for schedule(static) if (R > 4) reduction(| : bad)
    for (Index r = 0; r < R; ++r) {
      const T* row = logits.data() + r * V;
      bad |= !all_finite(row, V);
      const Index b = st.sentence_of(r);
      const auto& prefix = prefixes[static_cast<size_t>(b)];
      if (t < static_cast<Index>(prefix.size())) {
        next[static_cast<size_t>(r)] = prefix[static_cast<size_t>(t)];
      } else if (sampling.active()) {
        std::vector<Index> ids;
        std::vector<double> probs;
        next[static_cast<size_t>(r)] = sample_token(row, V, sampling, static_cast<std::uint64_t>(b),
                                                    static_cast<std::uint64_t>(t), ids, probs, c.pad_id);
      } else {
        next[static_cast<size_t>(r)] = argmax_but(row, V, c.pad_id);  // never the padding id
      }
    }
    if (bad) throw_nonfinite_logits("greedy_decode", t);
    keep.clear();
    for (Index r = 0; r < R; ++r) {
      const Index b = st.sentence_of(r);
      out(b, t) = next[static_cast<size_t>(r)];
      ++emitted[static_cast<size_t>(b)];
      if (record)
        append_step_weights(st.decoder.cross_weights, r, c.n_heads, source_length(st, b),
                            recorded[static_cast<size_t>(b)]);
      // a sentence stops at the end token or at its own limit
      if (next[static_cast<size_t>(r)] != end_id && t + 1 < limits[static_cast<size_t>(b)]) keep.push_back(r);
    }
    if (static_cast<Index>(keep.size()) != R) st.select_rows(keep);  // finished sentences leave the batch
    tokens.resize(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) tokens[i] = next[static_cast<size_t>(keep[i])];
  }
  st.decoder.record_cross = false;
  for (size_t b = 0; b < recorded.size(); ++b)
    extras->attention.push_back(cross_attention_of(recorded[b], emitted[b], decoder_layers(c), c.n_heads,
                                                   source_length(st, static_cast<Index>(b))));
  return out;
}

namespace {

// One beam search: the live beams (one decoder row each, a sentence's rows contiguous), the
// finished hypotheses, and one step at a time.
template <typename T>
class BeamRun {
 public:
  struct Live {
    Index sentence;
    std::vector<std::int64_t> tokens;
    double log_prob;
    std::vector<Index> path;  // with record: the decoder row of each step (which made tokens[t])
    ConstraintState constraints;
  };
  struct Cand {
    double lp;
    Index row;
    std::int64_t tok;
    Index bank;  // the constraint tokens met after it
  };

  BeamRun(Transformer<T>& model, InferenceState<T>& st, InferenceBackend<T>& be, std::int64_t end_id, Index beam_size,
          double alpha, Index n_best, bool record)
      : model_(model),
        st_(st),
        be_(be),
        end_id_(end_id),
        beam_size_(beam_size),
        alpha_(alpha),
        n_best_(n_best),
        record_(record) {}

  double penalty(Index len) const {
    const double n = static_cast<double>(len);
    return hf_ ? std::pow(n, alpha_) : std::pow((5.0 + n) / 6.0, alpha_);
  }

  // Hugging Face's rules (LengthRule::Hf) and the forced end at the limit.
  void set_rules(const DecodeExtras* extras) {
    if (extras == nullptr) return;
    hf_ = extras->length_rule == LengthRule::Hf;
    early_ = extras->early_stopping;
    force_end_ = extras->force_end;
  }

  void start(Index B, std::int64_t start_id) {
    finished_.assign(static_cast<size_t>(B), {});
    live_.reserve(static_cast<size_t>(B));
    for (Index b = 0; b < B; ++b)
      live_.push_back({b, {}, 0.0, {}, start_constraints(constraints[static_cast<size_t>(b)])});
    feed_.assign(static_cast<size_t>(B), start_id);
    keep_per_row_ = std::min<Index>(2 * beam_size_, model_.config().tgt_vocab_size - 1);
  }

  bool running() const { return !live_.empty(); }

  // One position of every live beam: logits, then each sentence's new beams.
  void step(Index t) {
    const Matrix<T>& logits = model_.infer_step(feed_.data(), be_, st_);  // (R, V), row r = live[r]
    score_rows(logits, t);
    if (record_) history_.push_back(st_.decoder.cross_weights);
    next_.clear();
    rows_.clear();
    next_feed_.clear();
    const Index R = st_.rows();
    for (Index r0 = 0; r0 < R;) {
      const Index s = live_[static_cast<size_t>(r0)].sentence;
      Index r1 = r0;
      while (r1 < R && live_[static_cast<size_t>(r1)].sentence == s) ++r1;
      extend_sentence(logits, s, r0, r1, t);
      r0 = r1;
    }
    compact();
  }

  // Beams still alive (none once the steps ran out), then each sentence's n_best.
  std::vector<std::vector<BeamHypothesis>> finish() {
    for (const Live& l : live_)
      finished_[static_cast<size_t>(l.sentence)].push_back(hypothesis(l, l.tokens, l.log_prob, {}, false));
    for (auto& fin : finished_) {
      std::stable_sort(fin.begin(), fin.end(), [](const BeamHypothesis& a, const BeamHypothesis& b) {
        return a.constraints_missing < b.constraints_missing ||
               (a.constraints_missing == b.constraints_missing && a.score > b.score);
      });
      if (static_cast<Index>(fin.size()) > n_best_) fin.resize(static_cast<size_t>(n_best_));
    }
    return std::move(finished_);
  }

  std::vector<Index> limits;
  std::vector<std::vector<std::int64_t>> prefixes;
  std::vector<std::vector<Phrase>> constraints;

 private:
  // per live row: its best 2k continuations (enough to refill k beams) and its log-sum-exp
  void score_rows(const Matrix<T>& logits, Index t) {
    const Index R = st_.rows(), V = model_.config().tgt_vocab_size;
    top_.resize(static_cast<size_t>(R));
    lse_.resize(static_cast<size_t>(R));
    int bad = 0;
#pragma omp parallel for schedule(static) if (R > 4) reduction(| : bad)
    for (Index r = 0; r < R; ++r) {
      bad |= !all_finite(logits.data() + r * V, V);
      lse_[static_cast<size_t>(r)] = top_ids_and_lse(logits.data() + r * V, V, keep_per_row_,
                                                     top_[static_cast<size_t>(r)], model_.config().pad_id);
    }
    if (bad) throw_nonfinite_logits("beam_search", t);
  }

  // The continuations of sentence s's rows [r0, r1), best first: its forced prefix token while in
  // the prefix; else each row's top ids and, with constraints, the ids that advance them (an end
  // only once every constraint is met), taken from the banks in turn.
  std::vector<Cand> candidates(const Matrix<T>& logits, Index s, Index r0, Index r1, Index t) const {
    const Index V = model_.config().tgt_vocab_size;
    const auto& prefix = prefixes[static_cast<size_t>(s)];
    const auto& phrases = constraints[static_cast<size_t>(s)];
    std::vector<Cand> cands;
    std::vector<std::int64_t> ids;
    const bool forced = force_end_ && t + 1 >= limits[static_cast<size_t>(s)] && t >= static_cast<Index>(prefix.size());
    for (Index r = r0; r < r1; ++r) {
      const Live& l = live_[static_cast<size_t>(r)];
      ids.clear();
      if (forced) {  // the end token alone, as if its log-probability were 0
        cands.push_back({l.log_prob, r, end_id_, 0});
        continue;
      }
      if (t < static_cast<Index>(prefix.size())) {
        ids.push_back(prefix[static_cast<size_t>(t)]);
      } else {
        for (Index tok : top_[static_cast<size_t>(r)]) ids.push_back(tok);
        const size_t from_model = ids.size();
        if (!phrases.empty()) constraint_tokens(l.constraints, phrases, ids);
        for (size_t i = from_model; i < ids.size(); ++i) {  // drop ids already among the candidates
          const auto before = ids.begin() + static_cast<std::ptrdiff_t>(i);
          if (std::find(ids.begin(), before, ids[i]) != before) ids[i] = -1;
        }
      }
      const T* row = logits.data() + r * V;
      for (std::int64_t tok : ids) {
        if (tok < 0) continue;  // a duplicate dropped above
        Index bank = 0;
        if (!phrases.empty()) {
          const ConstraintState next = advance_constraints(l.constraints, phrases, tok);
          if (tok == end_id_ && next.missing > 0) continue;  // may not end before every constraint
          bank = next.met_tokens;
        }
        cands.push_back({l.log_prob + (static_cast<double>(row[tok]) - lse_[static_cast<size_t>(r)]), r, tok, bank});
      }
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.lp > b.lp; });
    return phrases.empty() ? cands : by_banks(cands);
  }

  // Dynamic beam allocation: the best of every bank (most constraint tokens met first), then the
  // second best of each, and so on.
  static std::vector<Cand> by_banks(const std::vector<Cand>& sorted) {
    Index top_bank = 0;
    for (const Cand& c : sorted) top_bank = std::max(top_bank, c.bank);
    std::vector<std::vector<Cand>> banks(static_cast<size_t>(top_bank + 1));
    for (const Cand& c : sorted) banks[static_cast<size_t>(c.bank)].push_back(c);
    std::vector<Cand> out;
    for (size_t i = 0; out.size() < sorted.size(); ++i)
      for (Index b = top_bank; b >= 0; --b)
        if (i < banks[static_cast<size_t>(b)].size()) out.push_back(banks[static_cast<size_t>(b)][i]);
    return out;
  }

  // Sentence s's next beams from its rows [r0, r1), its finished hypotheses, and whether it is done.
  void extend_sentence(const Matrix<T>& logits, Index s, Index r0, Index r1, Index t) {
    const size_t first_new = next_.size();
    const auto& phrases = constraints[static_cast<size_t>(s)];
    Index rank = -1;
    for (const Cand& cd : candidates(logits, s, r0, r1, t)) {
      ++rank;
      if (static_cast<Index>(next_.size() - first_new) >= beam_size_) break;
      const bool ends = cd.tok == end_id_ || t + 1 >= limits[static_cast<size_t>(s)];
      if (hf_ && ends && rank >= beam_size_) continue;  // Hugging Face: only the first beam_size may finish
      const Live& parent = live_[static_cast<size_t>(cd.row)];
      std::vector<std::int64_t> toks = parent.tokens;
      toks.push_back(cd.tok);
      std::vector<Index> path;
      if (record_) {
        path = parent.path;
        path.push_back(cd.row);
      }
      ConstraintState cs =
          phrases.empty() ? parent.constraints : advance_constraints(parent.constraints, phrases, cd.tok);
      if (cd.tok == end_id_) {
        finished_[static_cast<size_t>(s)].push_back(hypothesis(parent, std::move(toks), cd.lp, path, true, &cs));
      } else if (t + 1 < limits[static_cast<size_t>(s)]) {
        next_.push_back({s, std::move(toks), cd.lp, std::move(path), std::move(cs)});
        rows_.push_back(cd.row);
        next_feed_.push_back(cd.tok);
      } else {
        // cut at the sentence's limit: kept as an unfinished hypothesis; a placeholder counts it
        // toward the beam and is removed by compact()
        finished_[static_cast<size_t>(s)].push_back(hypothesis(parent, std::move(toks), cd.lp, path, false, &cs));
        next_.push_back({s, {}, 0.0, {}, {}});
        rows_.push_back(-1);
        next_feed_.push_back(model_.config().pad_id);
      }
    }
    if (hf_ ? hf_sentence_done(s, first_new, t) : sentence_done(s, first_new)) {  // drop its live beams
      next_.resize(first_new);
      rows_.resize(first_new);
      next_feed_.resize(first_new);
    }
  }

  // No live beam of sentence s can still beat its n_best-th finished hypothesis: log-probs only
  // fall, so a live beam's best possible score is log_prob / penalty(the sentence's limit).
  bool sentence_done(Index s, size_t first_new) const {
    double best_live = -std::numeric_limits<double>::infinity();
    bool any = false;
    const double longest = penalty(limits[static_cast<size_t>(s)]);
    for (size_t i = first_new; i < next_.size(); ++i)
      if (rows_[i] >= 0) {
        any = true;
        best_live = std::max(best_live, next_[i].log_prob / longest);
      }
    if (!any) return true;
    const auto& fin = finished_[static_cast<size_t>(s)];
    if (static_cast<Index>(fin.size()) < n_best_) return false;
    std::vector<double> scores;
    for (auto& h : fin) scores.push_back(h.score);
    std::nth_element(scores.begin(), scores.begin() + (n_best_ - 1), scores.end(), std::greater<double>());
    return scores[static_cast<size_t>(n_best_ - 1)] >= best_live;
  }

  // Hugging Face's stop (LengthRule::Hf): beam_size finished hypotheses, and by early_stopping
  // the best live beam scored at its current length (or at the limit) does not beat the last.
  bool hf_sentence_done(Index s, size_t first_new, Index t) const {
    double best_live = -std::numeric_limits<double>::infinity();
    bool any = false;
    for (size_t i = first_new; i < next_.size(); ++i)
      if (rows_[i] >= 0) {
        any = true;
        best_live = std::max(best_live, next_[i].log_prob);
      }
    if (!any) return true;
    const auto& fin = finished_[static_cast<size_t>(s)];
    if (static_cast<Index>(fin.size()) < beam_size_) return false;
    if (early_ == EarlyStopping::First) return true;
    const Index len = early_ == EarlyStopping::Never && alpha_ > 0.0 ? limits[static_cast<size_t>(s)] : t + 1;
    std::vector<double> scores;
    for (auto& h : fin) scores.push_back(h.score);
    std::nth_element(scores.begin(), scores.begin() + (beam_size_ - 1), scores.end(), std::greater<double>());
    return scores[static_cast<size_t>(beam_size_ - 1)] >= best_live / penalty(len);
  }

  // the new beams without the placeholders of hypotheses cut at their limit
  void compact() {
    live_.clear();
    feed_.clear();
    std::vector<Index> keep;
    for (size_t i = 0; i < next_.size(); ++i) {
      if (rows_[i] < 0) continue;
      live_.push_back(std::move(next_[i]));
      keep.push_back(rows_[i]);
      feed_.push_back(next_feed_[i]);
    }
    if (!live_.empty()) st_.select_rows(keep);
  }

  BeamHypothesis hypothesis(const Live& from, std::vector<std::int64_t> toks, double lp, const std::vector<Index>& path,
                            bool ended, const ConstraintState* cs = nullptr) const {
    const Index len = static_cast<Index>(toks.size());
    const Index s = from.sentence;
    BeamHypothesis h{std::move(toks), lp, lp / penalty(len), ended, (cs ? *cs : from.constraints).missing, {}};
    if (record_)
      h.attention = attention_along(history_, ended || cs ? path : from.path, decoder_layers(model_.config()),
                                    model_.config().n_heads, source_length(st_, s));
    return h;
  }

  Transformer<T>& model_;
  InferenceState<T>& st_;
  InferenceBackend<T>& be_;
  std::int64_t end_id_;
  Index beam_size_;
  double alpha_;
  Index n_best_;
  bool record_;
  bool hf_ = false;
  EarlyStopping early_ = EarlyStopping::Heuristic;
  bool force_end_ = false;
  Index keep_per_row_ = 1;
  std::vector<Live> live_, next_;
  std::vector<Index> rows_;
  std::vector<std::int64_t> feed_, next_feed_;
  std::vector<std::vector<Index>> top_;
  std::vector<double> lse_;
  std::vector<std::vector<BeamHypothesis>> finished_;
  // with record: every step's cross-attention weights of all its rows, per layer; a hypothesis's
  // own are read along its path when it is finished
  std::vector<std::vector<Matrix<T>>> history_;
};

// The checks of beam_search's scalar arguments.
template <typename T>
void check_beam_arguments(const Transformer<T>& model, std::int64_t start_id, std::int64_t end_id, Index max_length,
                          Index beam_size, double alpha, Index n_best) {
  check_special_ids(model.config(), start_id, end_id, "beam_search");
  TCPP_CHECK(beam_size >= 1 && beam_size <= kMaxBeamSize, "beam_search: beam_size must be in [1, ", kMaxBeamSize,
             "], got ", beam_size);
  TCPP_CHECK(n_best >= 1 && n_best <= beam_size, "beam_search: n_best must be in [1, beam_size = ", beam_size,
             "], got ", n_best);
  TCPP_CHECK(max_length >= 1, "beam_search: max_length must be >= 1, got ", max_length);
  TCPP_CHECK(std::isfinite(alpha) && alpha >= 0.0, "beam_search: length_penalty must be a finite number >= 0, got ",
             alpha);
  TCPP_CHECK(std::isfinite(std::pow((5.0 + static_cast<double>(max_length)) / 6.0, alpha)),
             "beam_search: length_penalty ", alpha, " is too large for max_length ", max_length,
             ": the penalty ((5 + length) / 6) ** length_penalty overflows");
}
}  // namespace

template <typename T>
std::vector<std::vector<BeamHypothesis>> beam_search(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id,
                                                     std::int64_t end_id, Index max_length, Index beam_size,
                                                     double alpha, Index n_best, DecodeWorkspace<T>* workspace,
                                                     ComputeType compute, bool weights_unchanged,
                                                     DecodeExtras* extras) {
  check_compute_type<T>(compute, "beam_search");
  check_beam_arguments(model, start_id, end_id, max_length, beam_size, alpha, n_best);
  const Index B = src.rows(), V = model.config().tgt_vocab_size;
  std::vector<Index> limits = sentence_limits(extras, B, max_length, "beam_search");
  auto prefixes = sentence_prefixes(extras, limits, V, model.config().pad_id, end_id, "beam_search");
  auto constraints = sentence_constraints(extras, B, beam_size, V, model.config().pad_id, end_id);
  const bool record = extras != nullptr && extras->record_attention;
  if (extras != nullptr && extras->length_rule == LengthRule::Hf)
    TCPP_CHECK(std::isfinite(std::pow(static_cast<double>(max_length), alpha)), "beam_search: length_penalty ", alpha,
               " is too large for max_length ", max_length, ": the penalty length ** length_penalty overflows");
  if (B == 0) return std::vector<std::vector<BeamHypothesis>>();
  check_decode(model, src, B * beam_size, max_length, "beam_search",
               concat("beam_size ", beam_size, " and max_length ", max_length, " for ", B,
                      " sentences of source length ", src.cols()),
               workspace, weights_unchanged, record);
  std::unique_ptr<DecodeWorkspace<T>> local;
  DecodeWorkspace<T>& ws = workspace_for(model, workspace, local);
  // after the first step every sentence has up to beam_size rows
  InferenceBackend<T>& be = begin_backend(ws, compute, B * beam_size, weights_unchanged);
  InferenceState<T>& st = ws.state;
  model.infer_start(src, max_length, be, st);
  st.decoder.record_cross = record;
  BeamRun<T> run(model, st, be, end_id, beam_size, alpha, n_best, record);
  run.limits = std::move(limits);
  run.prefixes = std::move(prefixes);
  run.constraints = std::move(constraints);
  run.set_rules(extras);
  run.start(B, start_id);
  for (Index t = 0; t < max_length && run.running(); ++t) run.step(t);
  st.decoder.record_cross = false;
  return run.finish();
}

template TokenMatrix greedy_decode<float>(Transformer<float>&, ConstTokenMap, std::int64_t, std::int64_t, Index,
                                          DecodeWorkspace<float>*, ComputeType, bool, DecodeExtras*);
template TokenMatrix greedy_decode<double>(Transformer<double>&, ConstTokenMap, std::int64_t, std::int64_t, Index,
                                           DecodeWorkspace<double>*, ComputeType, bool, DecodeExtras*);
template std::vector<std::vector<BeamHypothesis>> beam_search<float>(Transformer<float>&, ConstTokenMap, std::int64_t,
                                                                     std::int64_t, Index, Index, double, Index,
                                                                     DecodeWorkspace<float>*, ComputeType, bool,
                                                                     DecodeExtras*);
template std::vector<std::vector<BeamHypothesis>> beam_search<double>(Transformer<double>&, ConstTokenMap, std::int64_t,
                                                                      std::int64_t, Index, Index, double, Index,
                                                                      DecodeWorkspace<double>*, ComputeType, bool,
                                                                      DecodeExtras*);

}  // namespace transformer
