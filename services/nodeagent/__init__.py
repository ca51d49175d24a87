"""elastico.nodeagent"""
