"""The command line (``python -m hermes_transport``): ``demo`` and ``probe``.

``main`` is the argparse entry; ``demo`` runs the openai SDK through the fault
scenarios. The probe is in layers, each importing only those below it and the
package's lower layers: ``redact`` (masking the key), ``console`` (the
terminal), ``timeline`` (what was seen), ``options`` (the command line) and
``probe`` (the run, its verdict and report). Their pictures (``--svg``):
``figure`` (what a picture shows), ``svg_marks`` and ``svg`` (the drawing and its
file), ``sent`` (spans from the fault server's record), ``probe_svg`` and ``demo_svg``.
"""
