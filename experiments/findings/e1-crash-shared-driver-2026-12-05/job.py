from pgval.topologies.builtin import make_sst
build = make_sst(window_ms=2000, watermark_ms=1000)
