/* ONNX LSTM and GRU, unrolled over the sequence (schema/onnx/onnx_map_rnn.c):
 * small language models as PyTorch exports them (fixed and dynamic batch,
 * opsets 13 and 17, a 2-layer bidirectional LSTM) against PyTorch's
 * logits, and single-op cases (directions, initial states, layout 1, GRU's
 * linear_before_reset) against NumPy written from the ONNX operator
 * documentation (rnn.py); unsupported attributes are refused by name. */
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "onnx_test_util.h"

static const char *rnn_dir(void) { return onnx_cases("rnn.py"); }

FG_TEST(onnx_lstm_lm_matches_pytorch, "") {
  const char *d = rnn_dir();
  if (!d) return;
  static const char *const cases[] = {
      "lstm_lm_op13",     "lstm_lm_op17",        "lstm_lm_op13_dyn", "lstm_lm_op13_dyn_b5",
      "lstm_lm_op17_dyn", "lstm_lm_op17_dyn_b5", "lstm2_bidir_lm",   "lstm2_bidir_lm_b5"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    onnx_check_case(d, cases[i], NULL, 1e-4, 1e-5);
}

FG_TEST(onnx_gru_lm_matches_pytorch, "") {
  const char *d = rnn_dir();
  if (!d) return;
  static const char *const cases[] = {"gru_lm_op13",     "gru_lm_op17",
                                      "gru_lm_op13_dyn", "gru_lm_op13_dyn_b5",
                                      "gru_lm_op17_dyn", "gru_lm_op17_dyn_b5"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    onnx_check_case(d, cases[i], NULL, 1e-4, 1e-5);
}

FG_TEST(onnx_lstm_op_forms, "") {
  const char *d = rnn_dir();
  if (!d) return;
  onnx_check_case(d, "lstm_forward", NULL, 1e-5, 1e-6);
  onnx_check_case(d, "lstm_reverse_init", NULL, 1e-5, 1e-6);
  onnx_check_case(d, "lstm_bidir_layout1", NULL, 1e-5, 1e-6);
}

FG_TEST(onnx_gru_op_forms, "") {
  const char *d = rnn_dir();
  if (!d) return;
  onnx_check_case(d, "gru_forward_lbr1", NULL, 1e-5, 1e-6);
  onnx_check_case(d, "gru_bidir_lbr0_init", NULL, 1e-5, 1e-6);
  onnx_check_case(d, "gru_reverse_lbr0_layout1", NULL, 1e-5, 1e-6);
}

FG_TEST(onnx_rnn_unsupported_attributes_refused, "badinput") {
  const char *d = rnn_dir();
  if (!d) return;
  onnx_expect_error(d, "lstm_clip", FG_UNIMPLEMENTED, "attribute clip (2) is not supported");
  onnx_expect_error(d, "gru_activations", FG_UNIMPLEMENTED,
                    "attribute activations: only the defaults");
}
