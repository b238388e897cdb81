"""Rows of a generated ncu raw CSV (the "Command line profiler metrics" long layout):
the header and a row template shared by the roofline tests."""

#: The header of the long (one metric per row) raw layout.
ID = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
      '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
      '"Metric Value"')
#: One metric row: launch id, kernel name, metric name, unit, value.
ROW = ('"{}","1234","python3","127.0.0.1","{}","1","7","(256, 1, 1)","(64, 64, 1)",'
       '"0","9.0","Command line profiler metrics","{}","{}","{}"')
#: The per-opcode SASS thread instruction counter (fadd, fmul, ffma, hfma, dfma ...).
S = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
