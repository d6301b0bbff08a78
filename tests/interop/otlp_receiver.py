"""An OTLP/HTTP receiver on the official OpenTelemetry protobuf definitions
(`opentelemetry-proto` from PyPI): every span of every ExportTraceServiceRequest POSTed to
/v1/traces is written as one JSON line to OUT; every histogram data point of every
ExportMetricsServiceRequest POSTed to /v1/metrics as one JSON line to OUT.metrics (each export
a whole cumulative state: the reader takes the last).

usage: otlp_receiver.py PORT OUT
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[2]


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def metrics(self, body):
        req = ExportMetricsServiceRequest.FromString(body)
        lines = []
        for rm in req.resource_metrics:
            resource = {a.key: value(a.value) for a in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    if kind != "histogram":
                        lines.append(json.dumps({"name": m.name, "kind": kind}))
                        continue
                    for p in m.histogram.data_points:
                        lines.append(json.dumps({
                            "service": resource.get("service.name"),
                            "scope": sm.scope.name,
                            "name": m.name,
                            "description": m.description,
                            "unit": m.unit,
                            "temporality": m.histogram.aggregation_temporality,
                            "attributes": {a.key: value(a.value) for a in p.attributes},
                            "count": p.count,
                            "sum": p.sum,
                            "min": p.min,
                            "max": p.max,
                            "bucket_counts": list(p.bucket_counts),
                            "explicit_bounds": list(p.explicit_bounds),
                            "start": p.start_time_unix_nano,
                            "time": p.time_unix_nano,
                        }))
        # One export per line group: a marker line first.
        with open(OUT + ".metrics", "a") as f:
            f.write(json.dumps({"export_points": len(lines)}) + "\n")
            for l in lines:
                f.write(l + "\n")
        out = ExportMetricsServiceResponse().SerializeToString()
        self.reply(out)

    def reply(self, out):
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/v1/metrics":
            return self.metrics(body)
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
                        "links": [
                            {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()}
                            for l in s.links
                        ],
                        "duration_ns": s.end_time_unix_nano - s.start_time_unix_nano,
                    }))
        with open(OUT, "a") as f:
            for l in lines:
                f.write(l + "\n")
        out = ExportTraceServiceResponse().SerializeToString()
        self.reply(out)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
