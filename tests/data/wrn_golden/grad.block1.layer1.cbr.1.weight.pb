Bgrad.block1.layer1.cbr.1.weightJ ¾6»õº)½ßŽ¼©ÓD=©=É<¯C6=[¥û¼
Ô½