from apps.sft.main import main

# vLLM's CPU platform starts processes with `spawn`: the entry point must be guarded.
if __name__ == "__main__":
    main()
