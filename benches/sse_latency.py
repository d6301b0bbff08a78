"""SSE per-event latency, for benches/load.sh.

`serve PORT N GAP`: an upstream answering every POST with an SSE stream of N progress
notifications GAP seconds apart, each carrying the monotonic time it was written, then the
result. `measure PORT ROUNDS`: ROUNDS such calls; prints the median of (time the client read the
event - time the upstream wrote it), in µs. Run against the upstream directly and through a
proxy, the difference is the latency the proxy adds to each event. Both ends use the same
CLOCK_MONOTONIC, so no clock skew enters.
"""
import socket, sys, threading, time, json, statistics, http.client
def upstream(port, n, gap):
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen(16)
    def serve(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = c.makefile("rb")
        while True:
            line = f.readline()
            if not line: return
            clen = 0
            while line not in (b"\r\n", b"\n", b""):
                if line.lower().startswith(b"content-length:"): clen = int(line.split(b":")[1])
                line = f.readline()
            body = f.read(clen)
            rid = json.loads(body)["id"]
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for i in range(n):
                time.sleep(gap)
                ev = json.dumps({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":i,"t":time.monotonic_ns()}})
                data = f"event: message\ndata: {ev}\n\n".encode()
                c.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            data = f"event: message\ndata: {json.dumps({'jsonrpc':'2.0','id':rid,'result':{}})}\n\n".encode()
            c.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
    while True:
        c, _ = srv.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
def measure(port, rounds):
    c = http.client.HTTPConnection("127.0.0.1", port)
    lat = []
    for r in range(rounds):
        c.request("POST", "/mcp", json.dumps({"jsonrpc":"2.0","id":r+1,"method":"tools/call","params":{"name":"x"}}),
                  {"content-type":"application/json","accept":"application/json, text/event-stream"})
        resp = c.getresponse(); buf = b""
        while True:
            chunk = resp.read1(65536)
            now = time.monotonic_ns()
            if not chunk: break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                d = json.loads(ev.split(b"data: ", 1)[1])
                if "t" in d.get("params", {}): lat.append((now - d["params"]["t"]) / 1000)
    return lat
if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "serve": upstream(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        lat = measure(int(sys.argv[2]), int(sys.argv[3]))
        print(f"{statistics.median(lat):.0f}")
