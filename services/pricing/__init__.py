"""elastico.pricing"""
