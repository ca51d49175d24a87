"""elastico.placer"""
