"""`odf sql`: datasets staged as tables (`query`), embedded DataFusion, the command, its shell."""
