/*
 * test_fuzz_text.c — the text loader target (fuzz/fuzz_data.c, FUZZ_DATA_TEXT)
 * over every seed of fuzz/corpus_text, under the normal build and SAN=1: each
 * input must pass the target's own checks (which abort otherwise). A missing
 * corpus is a failure. Run from the repository root by `make test`.
 */
#include "../fuzz/fuzz.h" /* linked with fuzz/fuzz_data.c (FUZZ_DATA_TEXT) and fuzz/replay.c */

#include "check.h"

int main(void)
{
    const char *dir = "fuzz/corpus_text";
    int files = 0;
    int rc = f8_fuzz_replay(dir, &files);
    CHECK(rc == 0, "cannot read the corpus %s", dir);
    CHECK(files >= 4, "%s holds %d inputs; the corpus is missing", dir, files);
    f8_fuzz_teardown();
    printf("test_fuzz_text: %d inputs from %s\n", files, dir);
    return test_finish("test_fuzz_text");
}
