"""pytest over the installed package (python/tests/test_package.py). The two
scripts beside it run on their own: run_cpu.py is driven by
tests/test_python.c, test_torch.py needs torch (and a GPU for half of it)."""
collect_ignore = ["run_cpu.py", "test_torch.py"]
