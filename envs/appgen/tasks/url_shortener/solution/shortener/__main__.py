"""python -m shortener [--db PATH] [--host H] [--port N]"""

import argparse

from shortener.server import create_server


def main():
    parser = argparse.ArgumentParser(prog="shortener")
    parser.add_argument("--db", default="links.db")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server = create_server(args.db, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
