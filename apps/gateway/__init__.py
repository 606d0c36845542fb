"""The OpenAI-compatible serving path: REST, SSE and WebSocket transports, admission, the engine
client. Other apps reach it only through ``apps.gateway.serving``."""
