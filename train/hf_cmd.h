/*
 * hf_cmd.h — f8_train's Hugging Face commands (hf_cmd.c):
 *   f8_train eval-hf DIR --tokens FILE     the loss of a GPT-2 or Llama checkpoint on tokens
 *   f8_train export-hf CHECKPOINT OUT_DIR  an f8_train checkpoint as a GPT-2 or a Llama
 * argv[1] is the command; they print and return the exit code.
 */
#ifndef F8_TRAIN_HF_CMD_H
#define F8_TRAIN_HF_CMD_H

int eval_hf_main(int argc, char **argv);
int export_hf_main(int argc, char **argv);

#endif /* F8_TRAIN_HF_CMD_H */
