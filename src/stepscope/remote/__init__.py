"""On-demand capture of running jobs over TensorFlow's profiler gRPC protocol.

``profiler_service.start(port)`` (public as ``stepscope.server.start``) in the profiled process
serves ``tensorflow.ProfilerService``; ``client.trace(addresses, logdir, duration_ms)`` captures
one or many such workers (stepscope's or TensorFlow's) into one run directory. Importing this
package does not import gRPC.
"""
