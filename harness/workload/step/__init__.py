"""How a workload's training step is called: the step adapters behind one interface (``interface.py``), registered
by name and chosen once before the loop (``adapters.py``), what the step's result is read as (``loss.py``), the
loop's side of it (``loop.py``), its validation step (``validation.py``) and its check on the meta device in the
parent (``on_meta.py``). Why a knob cannot act on such a step is ``harness.workload.own_knobs`` (torch-free)."""
