"""The browser app: sign-in, keys, chat, batches and the demo set-up (``bootstrap_demo``)."""
