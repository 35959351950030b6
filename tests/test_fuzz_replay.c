/*
 * test_fuzz_replay.c — the checkpoint fuzz target (fuzz/fuzz_checkpoint.c)
 * over every seed of fuzz/corpus, under the normal build (and under SAN=1,
 * ASan/UBSan/LSan): each input must be refused cleanly or load and pass the
 * target's own checks (which abort otherwise). A missing or nearly empty
 * corpus is a failure. F8_FUZZ_CORPUS overrides the directory (run from the
 * repository root by `make test`).
 */
#include "../fuzz/fuzz.h" /* linked with fuzz/fuzz_checkpoint.c and fuzz/replay.c */

#include "check.h"

int main(void)
{
    const char *dir = getenv("F8_FUZZ_CORPUS") ? getenv("F8_FUZZ_CORPUS") : "fuzz/corpus";
    int files = 0;
    int rc = f8_fuzz_replay(dir, &files);
    CHECK(rc == 0, "cannot read the corpus %s", dir);
    CHECK(files >= 10, "%s holds %d inputs; the corpus is missing", dir, files);
    f8_fuzz_teardown();
    printf("test_fuzz_replay: %d inputs from %s\n", files, dir);
    return test_finish("test_fuzz_replay");
}
