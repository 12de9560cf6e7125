"""gRPC protocol definitions for entropy service communication."""
