"""elastico.predictor"""
