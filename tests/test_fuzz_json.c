/*
 * test_fuzz_json.c — the JSON reader's fuzz target (fuzz/fuzz_json.c) over
 * every seed of fuzz/corpus_json, under the normal build and SAN=1: each
 * input must be refused cleanly or parse into a tree that passes the
 * target's checks and round-trips (which abort otherwise). A missing corpus
 * is a failure. Run from the repository root by `make test`.
 */
#include "../fuzz/fuzz.h" /* linked with fuzz/fuzz_json.c and fuzz/replay.c */

#include "check.h"

int main(void)
{
    const char *dir = "fuzz/corpus_json";
    int files = 0;
    int rc = f8_fuzz_replay(dir, &files);
    CHECK(rc == 0, "cannot read the corpus %s", dir);
    CHECK(files >= 20, "%s holds %d inputs; the corpus is missing", dir, files);
    f8_fuzz_teardown();
    printf("test_fuzz_json: %d inputs from %s\n", files, dir);
    return test_finish("test_fuzz_json");
}
