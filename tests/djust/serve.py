# tests/djust/serve.py: launch one djust backend on 127.0.0.1:<free port>; prints "LISTENING <port>" then serves until SIGTERM.
# Usage: <venv>/bin/python tests/djust/serve.py   (env: BACKEND_ID, REDIS_SOCKET, LOBBY_PREFIX, DJUST_TRUSTED_PROXY_COUNT,
#        ROOMGATE_HANDOFF_TOKEN; see tests/djust/README.md)
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "app"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rooms.settings")


def main():
    import uvicorn

    from rooms.asgi import application  # import (and fail) before announcing the port

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(True)
    config = uvicorn.Config(
        application,
        log_level="warning",
        access_log=False,
        lifespan="off",
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
