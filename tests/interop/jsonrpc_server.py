"""A plain JSON-RPC 2.0 server with the `json-rpc` library (and werkzeug), for interop tests.

usage: jsonrpc_server.py PORT
"""
import sys

from jsonrpc import JSONRPCResponseManager, dispatcher
from werkzeug.serving import run_simple
from werkzeug.wrappers import Request, Response


@dispatcher.add_method
def subtract(*args, **kwargs):
    if args:
        return args[0] - args[1]
    return kwargs["minuend"] - kwargs["subtrahend"]


@dispatcher.add_method
def update(*args):
    return None


@dispatcher.add_method
def foobar(*args, **kwargs):
    return "bar"


@dispatcher.add_method
def notify_hello(*args):
    return None


@dispatcher.add_method
def sum(*args):  # noqa: A001 - the specification's example method
    return args[0] + args[1] + args[2]


@dispatcher.add_method
def get_data():
    return ["hello", 5]


@Request.application
def app(request):
    resp = JSONRPCResponseManager.handle(request.get_data(cache=False, as_text=True), dispatcher)
    if resp is None:
        return Response(status=204)
    return Response(resp.json, mimetype="application/json")


run_simple("127.0.0.1", int(sys.argv[1]), app, threaded=True)
