"""An OTLP/HTTP trace receiver on the official OpenTelemetry protobuf definitions
(`opentelemetry-proto` from PyPI): every span of every ExportTraceServiceRequest POSTed to
/v1/traces is written as one JSON line to OUT.

usage: otlp_receiver.py PORT OUT
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[2]


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        req = ExportTraceServiceRequest.FromString(body)
        lines = []
        for rs in req.resource_spans:
            resource = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(json.dumps({
                        "service": resource.get("service.name"),
                        "scope": ss.scope.name,
                        "name": s.name,
                        "kind": s.kind,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "status": s.status.code,
                        "status_message": s.status.message,
                        "attributes": {a.key: value(a.value) for a in s.attributes},
                        "events": [e.name for e in s.events],
                        "duration_ns": s.end_time_unix_nano - s.start_time_unix_nano,
                    }))
        with open(OUT, "a") as f:
            for l in lines:
                f.write(l + "\n")
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
